#pragma once
// Per-slot memory: every byte a slot holds is counted against its modelled HBM
// capacity. Emulated slots hold host memory; cuda-backed slots hold memory of the
// real GPU behind them, drawn from torch's CUDA caching allocator.

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace hybrid {

// Allocates `nbytes` on `slot`, charging its capacity first: over capacity it
// throws c10::OutOfMemoryError and leaves every statistic as it was. The DataPtr
// carries device `label`: PrivateUse1 for hybrid storages, CPU while a CPU
// kernel runs on an emulated slot's behalf (see RouteCpuAllocations).
c10::DataPtr allocate_on(c10::DeviceIndex slot, size_t nbytes, c10::Device label);

// Takes ownership of memory allocated outside the slot allocator (a CPU or CUDA
// kernel's output) and charges it to `slot`. Throws OutOfMemoryError over
// capacity, in which case `foreign` is freed.
c10::DataPtr adopt(c10::DataPtr&& foreign, size_t nbytes, c10::DeviceIndex slot);

// True when `ptr` was made by allocate_on / adopt (so it is already counted).
bool is_slot_memory(const c10::DataPtr& ptr) noexcept;

struct SlotStats {
  int64_t allocated_bytes = 0;       // live bytes
  int64_t peak_allocated_bytes = 0;  // since the last reset_peak
  int64_t allocated_bytes_total = 0; // cumulative bytes ever allocated
  int64_t freed_bytes_total = 0;
  int64_t num_allocs = 0;            // cumulative
  int64_t num_frees = 0;             // cumulative
  int64_t live_allocations = 0;
  int64_t peak_live_allocations = 0;
  int64_t num_ooms = 0;
};

SlotStats slot_stats(c10::DeviceIndex slot);
void reset_peak_stats(c10::DeviceIndex slot);
void reset_accumulated_stats(c10::DeviceIndex slot);
// Zeroes the counters of slots [0, n): called when a new rack is installed.
void reset_slot_stats(c10::DeviceIndex n);
// "" when nothing is live, else e.g. "hybrid:0 holds 3 allocations (4.0 KiB)".
std::string live_allocation_summary();

// While alive on this thread, CPU allocations (the CPU kernels' outputs and
// workspace) are drawn from `slot` and counted against it.
class RouteCpuAllocations {
 public:
  explicit RouteCpuAllocations(c10::DeviceIndex slot) noexcept;
  ~RouteCpuAllocations();
  RouteCpuAllocations(const RouteCpuAllocations&) = delete;
  RouteCpuAllocations& operator=(const RouteCpuAllocations&) = delete;

 private:
  c10::DeviceIndex previous_;
};

// Installs the routing CPU allocator (once, at module load).
void install_cpu_routing();

// The allocator registered for PrivateUse1 (draws from the current slot).
c10::DeviceAllocator* device_allocator();

std::string format_bytes(int64_t bytes);

} // namespace hybrid
