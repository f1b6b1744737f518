#include "runtime/HybridAccounting.h"

#include "runtime/HybridSlots.h"

#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hybrid {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

// torch.cuda's caching allocator serves requests up to 1 MiB from its small
// pool; the pool columns of memory_stats split the same way here.
constexpr size_t kSmallSize = 1 << 20;

constexpr size_t kAll = static_cast<size_t>(StatType::AGGREGATE);

// The aggregate and the request's pool.
template <typename Fn>
void for_pools(size_t nbytes, Fn&& fn) {
  fn(static_cast<size_t>(StatType::AGGREGATE));
  fn(static_cast<size_t>(nbytes <= kSmallSize ? StatType::SMALL_POOL : StatType::LARGE_POOL));
}

} // namespace

void SlotAccount::charge(const SlotTable& table, c10::DeviceIndex slot, size_t nbytes) {
  const int64_t capacity = table.slot(slot).capacity;
  const int64_t set_limit = limit_;
  const int64_t allowed = set_limit >= 0 && set_limit < capacity ? set_limit : capacity;
  const auto request = static_cast<int64_t>(nbytes);
  int64_t in_use = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& s = stats_;
    in_use = s.allocated_bytes[kAll].current;
    if (request <= allowed - in_use) {
      for_pools(nbytes, [&](size_t pool) {
        s.allocated_bytes[pool].increase(nbytes);
        s.allocation[pool].increase(1);
      });
      s.num_device_alloc += 1;
      return;
    }
    s.num_ooms += 1;
  }
  if (allowed < capacity) {
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        table.label(slot), " is out of memory: tried to allocate ", format_bytes(request), " (",
        nbytes, " bytes); ", format_bytes(in_use), " (", in_use, " bytes) is in use of this process's limit of ",
        format_bytes(allowed), " (", allowed, " bytes, set by set_per_process_memory_fraction; the capacity is ",
        format_bytes(capacity), "), ", format_bytes(std::max<int64_t>(0, allowed - in_use)), " free.");
  }
  TORCH_CHECK_WITH(
      OutOfMemoryError, false,
      table.label(slot), " is out of memory: tried to allocate ", format_bytes(request), " (",
      nbytes, " bytes); ", format_bytes(in_use), " (", in_use,
      " bytes) is in use of a capacity of ", format_bytes(capacity), " (", capacity, " bytes), ",
      format_bytes(std::max<int64_t>(0, capacity - in_use)),
      " free. The capacity is the slot's modelled HBM; override it per slot "
      "with capacity = \"...\" in the rack spec.");
}

void SlotAccount::uncharge(size_t nbytes) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& s = stats_;
  for_pools(nbytes, [&](size_t pool) {
    s.allocated_bytes[pool].decrease(nbytes);
    s.allocation[pool].decrease(1);
  });
  s.num_device_free += 1;
}

c10::CachingDeviceAllocator::DeviceStats SlotAccount::stats() const {
  c10::CachingDeviceAllocator::DeviceStats out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out = stats_;
  }
  // Nothing is cached: every allocation is its own segment and active block,
  // and holds exactly what was requested, so these families are the two the
  // hot path keeps (counting each once per allocation, not four times).
  out.reserved_bytes = out.active_bytes = out.requested_bytes = out.allocated_bytes;
  out.segment = out.active = out.allocation;
  return out;
}

std::vector<int64_t> SlotAccount::peaks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int64_t> out;
  for (const auto& family : {&stats_.allocated_bytes, &stats_.allocation}) {
    for (const auto& stat : *family) out.push_back(stat.peak);
  }
  return out;
}

void SlotAccount::restore_peaks(const std::vector<int64_t>& saved) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t i = 0;
  for (auto* family : {&stats_.allocated_bytes, &stats_.allocation}) {
    for (auto& stat : *family) {
      TORCH_CHECK(i < saved.size(), "restore_peaks: ", saved.size(), " peaks given, more expected");
      stat.peak = std::max(stat.current, saved[i++]);
    }
  }
  TORCH_CHECK(i == saved.size(), "restore_peaks: ", saved.size(), " peaks given, ", i, " expected");
}

int64_t SlotAccount::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.allocated_bytes[kAll].current;
}

namespace {

// Every c10 Stat of a DeviceStats, so that a reset cannot miss one.
template <typename Fn>
void for_each_stat(c10::CachingDeviceAllocator::DeviceStats& s, Fn fn) {
  for (const auto type : c10::irange(static_cast<size_t>(StatType::NUM_TYPES))) {
    for (StatArray* array : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                             &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
                             &s.requested_bytes}) {
      fn((*array)[type]);
    }
  }
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

} // namespace

void SlotAccount::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& s = stats_;
  for_each_stat(s, [](Stat& stat) { stat.reset_peak(); });
}

void SlotAccount::reset_accumulated() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& s = stats_;
  for_each_stat(s, [](Stat& stat) { stat.reset_accumulated(); });
  s.num_alloc_retries = 0;
  s.num_ooms = 0;
  s.num_sync_all_streams = 0;
  s.num_device_alloc = 0;
  s.num_device_free = 0;
}

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

} // namespace hybrid
