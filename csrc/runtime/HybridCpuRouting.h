#pragma once
// CPU routing: while an emulated slot runs a CPU kernel, the CPU allocator
// draws from that slot, so the kernel's outputs and workspace are counted
// against the slot's capacity before anything is written (as on the device).

#include "runtime/HybridAllocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>

#include <optional>

namespace hybrid {

// While alive on this thread, CPU allocations are drawn from `slot` of
// `table`. The table must outlive the object (the op's entry point holds it).
class RouteCpuAllocations {
 public:
  RouteCpuAllocations(const SlotTablePtr& table, c10::DeviceIndex slot) noexcept;
  // Routes nothing (a copy to the host, a cuda-backed slot).
  RouteCpuAllocations() noexcept;
  ~RouteCpuAllocations();
  RouteCpuAllocations(const RouteCpuAllocations&) = delete;
  RouteCpuAllocations& operator=(const RouteCpuAllocations&) = delete;

 private:
  const SlotTablePtr* previous_table_;
  c10::DeviceIndex previous_slot_;
};

// Where a slot's kernel runs, for the scope of one call: on an emulated slot
// the CPU allocator draws from the slot; on a cuda-backed one a CUDA kernel's
// host-side temporaries stay the host's and `exec` (the slot's GPU) is the
// current device.
class SlotExecution {
 public:
  SlotExecution(const SlotTablePtr& table, c10::DeviceIndex slot, bool emulated, c10::Device exec) {
    if (emulated) {
      route_.emplace(table, slot);
    } else {
      route_.emplace();
      guard_.emplace(exec);
    }
  }

 private:
  std::optional<RouteCpuAllocations> route_;
  std::optional<c10::DeviceGuard> guard_;
};

// When `ptr` is slot memory the routing allocator handed to a CPU kernel, takes
// its block out of the routing's keeping (releasing `ptr` without freeing the
// bytes) and returns it; nullptr otherwise.
SlotBlock* take_routed(c10::DataPtr& ptr);

// Installs the routing CPU allocator (once, at module load).
void install_cpu_routing();

} // namespace hybrid
