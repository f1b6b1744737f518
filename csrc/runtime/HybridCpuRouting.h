#pragma once
// CPU routing: while an emulated slot runs a CPU kernel, the CPU allocator
// draws from that slot, so the kernel's outputs and workspace are counted
// against the slot's capacity before anything is written (as on the device).

#include "runtime/HybridAllocator.h"

#include <c10/core/Allocator.h>

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

// When `ptr` is slot memory the routing allocator handed to a CPU kernel, takes
// its block out of the routing's keeping (releasing `ptr` without freeing the
// bytes) and returns it; nullptr otherwise.
SlotBlock* take_routed(c10::DataPtr& ptr);

// Installs the routing CPU allocator (once, at module load).
void install_cpu_routing();

} // namespace hybrid
