#include "runtime/HybridAllocator.h"

#include "runtime/HybridGuard.h"
#include "runtime/HybridSlots.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>

namespace hybrid {
namespace {

// DeviceIndex is int8_t: a process can address at most 127 slots.
constexpr size_t kMaxSlots = 128;

struct SlotCounters {
  std::mutex mutex;  // guards stats; uncontended in the common single-thread case
  SlotStats stats;
};

std::array<SlotCounters, kMaxSlots>& counters() {
  static std::array<SlotCounters, kMaxSlots> all;
  return all;
}

SlotCounters& counters_for(c10::DeviceIndex slot) {
  TORCH_INTERNAL_ASSERT(slot >= 0 && static_cast<size_t>(slot) < kMaxSlots);
  return counters()[slot];
}

// Slot memory is tracked by address. CPU kernels may take raw pointers from
// the CPU allocator (raw_allocate / raw_deallocate), which requires the
// DataPtr's context to be the data pointer and one fixed deleter for every
// allocation; a side table of live blocks satisfies both. Sharded so that
// threads allocating on different addresses rarely meet on one mutex.
struct Block {
  c10::DeviceIndex slot;
  size_t size;
  c10::DataPtr inner;  // owns the bytes when they came from the CUDA allocator
};

constexpr size_t kShards = 16;

struct Shard {
  std::mutex mutex;
  std::unordered_map<void*, Block> blocks;
};

std::array<Shard, kShards>& shards() {
  static auto* all = new std::array<Shard, kShards>();  // outlives late frees at exit
  return *all;
}

Shard& shard_of(const void* ptr) {
  return shards()[(reinterpret_cast<uintptr_t>(ptr) >> 6) % kShards];
}

// What an adopted foreign DataPtr's context points at: the original DataPtr
// (whose context is not its data pointer, so it cannot go into the table).
struct Adopted {
  c10::DeviceIndex slot;
  size_t size;
  c10::DataPtr inner;
};

void charge(c10::DeviceIndex slot, size_t nbytes) {
  const SlotInfo& info = slot_info(slot);
  SlotCounters& c = counters_for(slot);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    SlotStats& s = c.stats;
    const auto request = static_cast<int64_t>(nbytes);
    if (s.allocated_bytes + request <= info.capacity) {
      s.allocated_bytes += request;
      s.peak_allocated_bytes = std::max(s.peak_allocated_bytes, s.allocated_bytes);
      s.allocated_bytes_total += request;
      s.num_allocs += 1;
      s.live_allocations += 1;
      s.peak_live_allocations = std::max(s.peak_live_allocations, s.live_allocations);
      return;
    }
    s.num_ooms += 1;
  }
  const SlotStats s = slot_stats(slot);
  TORCH_CHECK_WITH(
      OutOfMemoryError, false,
      slot_label(slot), " is out of memory: tried to allocate ",
      format_bytes(static_cast<int64_t>(nbytes)), " (", nbytes, " bytes); ",
      format_bytes(s.allocated_bytes), " (", s.allocated_bytes,
      " bytes) is in use of a capacity of ", format_bytes(info.capacity), " (",
      info.capacity, " bytes), ",
      format_bytes(std::max<int64_t>(0, info.capacity - s.allocated_bytes)),
      " free. The capacity is the slot's modelled HBM; override it per slot "
      "with capacity = \"...\" in the rack spec.");
}

void uncharge(c10::DeviceIndex slot, size_t nbytes) noexcept {
  SlotCounters& c = counters_for(slot);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.allocated_bytes -= static_cast<int64_t>(nbytes);
  c.stats.freed_bytes_total += static_cast<int64_t>(nbytes);
  c.stats.num_frees += 1;
  c.stats.live_allocations -= 1;
}

// The one deleter of table-tracked slot memory. Returns false (and does
// nothing) for a pointer the table does not hold.
bool release_tracked(void* ptr) noexcept {
  Shard& shard = shard_of(ptr);
  Block block;
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.blocks.find(ptr);
    if (it == shard.blocks.end()) return false;
    block = std::move(it->second);
    shard.blocks.erase(it);
  }
  if (block.inner) {
    block.inner.clear();
  } else {
    c10::free_cpu(ptr);
  }
  uncharge(block.slot, block.size);
  return true;
}

void free_tracked(void* ptr) noexcept {
  const bool known = release_tracked(ptr);
  TORCH_INTERNAL_ASSERT(known, "hybrid allocator: freeing an unknown block");
}

void free_adopted(void* ctx) noexcept {
  auto* block = static_cast<Adopted*>(ctx);
  block->inner.clear();
  uncharge(block->slot, block->size);
  delete block;
}

c10::DeleterFnPtr g_fallback_raw_deleter = nullptr;

// raw_deallocate on the CPU allocator lands here for every raw pointer,
// routed or not.
void raw_delete(void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (!release_tracked(ptr)) g_fallback_raw_deleter(ptr);
}

thread_local c10::DeviceIndex t_route = -1;

// Stands in for the CPU allocator so that a CPU kernel run on an emulated slot's
// behalf draws its outputs and workspace from that slot: over capacity the
// kernel fails before it writes anything, as it would on the device.
class RoutingCpuAllocator final : public c10::Allocator {
 public:
  explicit RoutingCpuAllocator(c10::Allocator* fallback) : fallback_(fallback) {}

  c10::DataPtr allocate(size_t nbytes) override {
    if (t_route < 0) {
      return fallback_->allocate(nbytes);
    }
    return allocate_on(t_route, nbytes, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* fallback_;
};

// Draws from the current slot, like CUDA's allocator draws from the current
// device. Registered for PrivateUse1, so it also answers torch.accelerator.
class HybridDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex slot = current_slot();
    return allocate_on(slot, nbytes, c10::Device(c10::kPrivateUse1, slot));
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    const c10::DeviceIndex slot = current_slot();
    if (slot < slot_count() && !is_emulated(slot)) {
      c10::GetAllocator(c10::kCUDA)->copy_data(dest, src, count);
    } else {
      std::memcpy(dest, src, count);
    }
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    // Nothing is cached: freed bytes go straight back (reserved == allocated).
  }
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // Emulated streams execute in order on the host; nothing to defer.
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const SlotStats s = slot_stats(device);
    c10::CachingDeviceAllocator::DeviceStats out;
    auto fill = [](c10::CachingAllocator::Stat& stat, int64_t current, int64_t peak,
                   int64_t allocated, int64_t freed) {
      stat.current = current;
      stat.peak = peak;
      stat.allocated = allocated;
      stat.freed = freed;
    };
    constexpr size_t kAggregate = 0;
    for (auto* array : {&out.allocated_bytes, &out.reserved_bytes, &out.active_bytes,
                        &out.requested_bytes}) {
      fill((*array)[kAggregate], s.allocated_bytes, s.peak_allocated_bytes,
           s.allocated_bytes_total, s.freed_bytes_total);
    }
    for (auto* array : {&out.allocation, &out.active, &out.segment}) {
      fill((*array)[kAggregate], s.live_allocations, s.peak_live_allocations,
           s.num_allocs, s.num_frees);
    }
    out.num_ooms = s.num_ooms;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    reset_accumulated_stats(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak_stats(device); }
};

HybridDeviceAllocator g_device_allocator;

} // namespace

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (std::abs(value) >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return buf;
}

c10::DataPtr allocate_on(c10::DeviceIndex slot, size_t nbytes, c10::Device label) {
  const SlotInfo& info = slot_info(slot);
  if (nbytes == 0) {
    // Like CUDA's allocator: an empty allocation holds no memory and is not counted.
    return c10::DataPtr(nullptr, label);
  }
  charge(slot, nbytes);
  Block block{slot, nbytes, c10::DataPtr()};
  void* ptr = nullptr;
  try {
    if (info.backing == Backing::Emulated) {
      ptr = c10::alloc_cpu(nbytes);
    } else {
      c10::DeviceGuard guard(c10::Device(c10::kCUDA, info.cuda_index));
      block.inner = c10::GetAllocator(c10::kCUDA)->allocate(nbytes);
      ptr = block.inner.get();
    }
  } catch (const c10::Error& e) {
    uncharge(slot, nbytes);
    TORCH_CHECK_WITH(OutOfMemoryError, false, slot_label(slot),
                     ": the memory behind the slot could not provide ",
                     format_bytes(static_cast<int64_t>(nbytes)), ": ", e.what_without_backtrace());
  }
  {
    Shard& shard = shard_of(ptr);
    std::lock_guard<std::mutex> lock(shard.mutex);
    shard.blocks.emplace(ptr, std::move(block));
  }
  return c10::DataPtr(ptr, ptr, &free_tracked, label);
}

c10::DataPtr adopt(c10::DataPtr&& foreign, size_t nbytes, c10::DeviceIndex slot) {
  const c10::Device label(c10::kPrivateUse1, slot);
  if (is_slot_memory(foreign)) {
    foreign.unsafe_set_device(label);
    return std::move(foreign);
  }
  charge(slot, nbytes);  // throws before we take ownership: `foreign` frees itself
  void* ptr = foreign.get();
  auto* block = new Adopted{slot, nbytes, std::move(foreign)};
  return c10::DataPtr(ptr, block, &free_adopted, label);
}

bool is_slot_memory(const c10::DataPtr& ptr) noexcept {
  return ptr.get_deleter() == &free_tracked || ptr.get_deleter() == &free_adopted;
}

SlotStats slot_stats(c10::DeviceIndex slot) {
  (void)slot_info(slot);  // validates the index
  SlotCounters& c = counters_for(slot);
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void reset_peak_stats(c10::DeviceIndex slot) {
  (void)slot_info(slot);
  SlotCounters& c = counters_for(slot);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_allocated_bytes = c.stats.allocated_bytes;
  c.stats.peak_live_allocations = c.stats.live_allocations;
}

void reset_accumulated_stats(c10::DeviceIndex slot) {
  (void)slot_info(slot);
  SlotCounters& c = counters_for(slot);
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.allocated_bytes_total = 0;
  c.stats.freed_bytes_total = 0;
  c.stats.num_allocs = 0;
  c.stats.num_frees = 0;
  c.stats.num_ooms = 0;
}

void reset_slot_stats(c10::DeviceIndex n) {
  for (c10::DeviceIndex i = 0; i < n && static_cast<size_t>(i) < kMaxSlots; ++i) {
    SlotCounters& c = counters()[i];
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats = SlotStats{};
  }
}

std::string live_allocation_summary() {
  std::ostringstream out;
  for (size_t i = 0; i < kMaxSlots; ++i) {
    SlotCounters& c = counters()[i];
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.stats.live_allocations == 0) continue;
    if (out.tellp() > 0) out << "; ";
    out << "hybrid:" << i << " holds " << c.stats.live_allocations << " allocation"
        << (c.stats.live_allocations == 1 ? "" : "s") << " ("
        << format_bytes(c.stats.allocated_bytes) << ")";
  }
  return out.str();
}

RouteCpuAllocations::RouteCpuAllocations(c10::DeviceIndex slot) noexcept
    : previous_(t_route) {
  t_route = slot;
}

RouteCpuAllocations::~RouteCpuAllocations() { t_route = previous_; }

void install_cpu_routing() {
  static bool installed = false;
  if (installed) return;
  c10::Allocator* fallback = c10::GetCPUAllocator();
  g_fallback_raw_deleter = fallback->raw_deleter();
  TORCH_CHECK(g_fallback_raw_deleter != nullptr,
              "the CPU allocator in place offers no raw deleter; cannot route CPU allocations");
  static RoutingCpuAllocator routing(fallback);
  // Priority above the default (0) so a later default registration cannot undo it.
  c10::SetCPUAllocator(&routing, /*priority=*/1);
  installed = true;
}

c10::DeviceAllocator* device_allocator() { return &g_device_allocator; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)

} // namespace hybrid
