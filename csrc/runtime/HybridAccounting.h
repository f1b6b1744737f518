#pragma once
// Per-slot memory accounting: every byte a slot holds is counted against its
// modelled HBM capacity, in c10's own DeviceStats (the structure
// torch.accelerator.memory_stats and torch.cuda.memory_stats read), kept as is.
// The allocator caches nothing, so one allocation is one segment and one
// active block, and reserved, active and requested bytes equal allocated
// bytes: the hot path counts allocations and their bytes, and stats() reports
// the families that equal them.

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace hybrid {

class SlotTable;

class SlotAccount {
 public:
  // Counts `nbytes` on slot `slot` of `table` (this account). Over capacity it
  // counts an out-of-memory event, changes nothing else and throws
  // c10::OutOfMemoryError naming the slot, the request, the use and the capacity.
  void charge(const SlotTable& table, c10::DeviceIndex slot, size_t nbytes);
  void uncharge(size_t nbytes) noexcept;

  c10::CachingDeviceAllocator::DeviceStats stats() const;
  int64_t allocated_bytes() const;
  void reset_peak();
  void reset_accumulated();

  // The peaks of the counted families (bytes and allocations, per pool), and their restoration (each peak
  // becomes the larger of the saved one and the current value): work that must not count towards the peak
  // (a compiler's benchmarking) runs between the two.
  std::vector<int64_t> peaks() const;
  void restore_peaks(const std::vector<int64_t>& saved);

  // A limit below the capacity (torch.cuda.set_per_process_memory_fraction);
  // negative: none, the capacity is the limit.
  void set_limit(int64_t bytes) noexcept { limit_ = bytes; }
  int64_t limit() const noexcept { return limit_; }

 private:
  mutable std::mutex mutex_;  // uncontended in the common single-thread case
  c10::CachingDeviceAllocator::DeviceStats stats_;
  std::atomic<int64_t> limit_{-1};
};

// "1.50 MiB".
std::string format_bytes(int64_t bytes);

} // namespace hybrid
