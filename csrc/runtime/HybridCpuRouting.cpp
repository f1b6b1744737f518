#include "runtime/HybridCpuRouting.h"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <array>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace hybrid {
namespace {

// CPU kernels may take raw pointers from the CPU allocator (raw_allocate /
// raw_deallocate), which requires the DataPtr's context to be the data pointer
// and one fixed deleter for every allocation. So a routed allocation's block
// is found by address, in a table sharded so that threads allocating on
// different addresses rarely meet on one mutex. When the kernel's output
// becomes a hybrid storage the block leaves this table (take_routed) and
// becomes the storage's context.
constexpr size_t kShards = 16;

// A kernel's scratch of one scalar (the cast of a wrapped Python number that
// TensorIterator makes for `x.add_(1)`) stays with the host allocator: CUDA
// passes such a scalar as a kernel argument and allocates no device memory for
// it, and routing it cost a third of a one-element op's overhead. A kernel
// output this small is still charged to the slot when it becomes a hybrid
// storage (adopt).
constexpr size_t kUnroutedScratchBytes = 16;

struct Shard {
  std::mutex mutex;
  std::unordered_map<void*, SlotBlock*> blocks;
};

std::array<Shard, kShards>& shards() {
  static auto* all = new std::array<Shard, kShards>();  // outlives late frees at exit
  return *all;
}

Shard& shard_of(const void* ptr) {
  return shards()[(reinterpret_cast<uintptr_t>(ptr) >> 6) % kShards];
}

SlotBlock* remove(void* ptr) noexcept {
  Shard& shard = shard_of(ptr);
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.blocks.find(ptr);
  if (it == shard.blocks.end()) return nullptr;
  SlotBlock* block = it->second;
  shard.blocks.erase(it);
  return block;
}

void free_routed(void* ptr) noexcept {
  SlotBlock* block = remove(ptr);
  TORCH_INTERNAL_ASSERT(block != nullptr, "hybrid allocator: freeing an unknown block");
  free_block(block);
}

c10::DeleterFnPtr g_fallback_raw_deleter = nullptr;

// raw_deallocate on the CPU allocator lands here for every raw pointer,
// routed or not.
void raw_delete(void* ptr) noexcept {
  if (ptr == nullptr) return;
  if (SlotBlock* block = remove(ptr)) {
    free_block(block);
  } else {
    g_fallback_raw_deleter(ptr);
  }
}

// Where this thread's CPU allocations go: nowhere (table == nullptr) or a slot.
struct Route {
  const SlotTablePtr* table = nullptr;
  c10::DeviceIndex slot = -1;
};
thread_local Route t_route;

// Stands in for the CPU allocator: draws from the routed slot while one is set.
class RoutingCpuAllocator final : public c10::Allocator {
 public:
  explicit RoutingCpuAllocator(c10::Allocator* fallback) : fallback_(fallback) {}

  c10::DataPtr allocate(size_t nbytes) override {
    const Route route = t_route;
    if (route.table == nullptr || nbytes <= kUnroutedScratchBytes) return fallback_->allocate(nbytes);
    SlotBlock* block = allocate_block(*route.table, route.slot, nbytes);
    void* data = block->data();
    {
      Shard& shard = shard_of(data);
      std::lock_guard<std::mutex> lock(shard.mutex);
      shard.blocks.emplace(data, block);
    }
    return c10::DataPtr(data, data, &free_routed, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &raw_delete; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* fallback_;
};

} // namespace

RouteCpuAllocations::RouteCpuAllocations(const SlotTablePtr& table, c10::DeviceIndex slot) noexcept {
  Route& route = t_route;
  previous_table_ = route.table;
  previous_slot_ = route.slot;
  route = Route{&table, slot};
}

RouteCpuAllocations::RouteCpuAllocations() noexcept {
  Route& route = t_route;
  previous_table_ = route.table;
  previous_slot_ = route.slot;
  route = Route{};
}

RouteCpuAllocations::~RouteCpuAllocations() { t_route = Route{previous_table_, previous_slot_}; }

SlotBlock* take_routed(c10::DataPtr& ptr) {
  if (ptr.get_deleter() != &free_routed) return nullptr;
  SlotBlock* block = remove(ptr.get());
  TORCH_INTERNAL_ASSERT(block != nullptr, "hybrid allocator: a routed block went missing");
  (void)ptr.release_context();  // the block now owns the bytes
  return block;
}

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

} // namespace hybrid
