#pragma once
// Pinned host memory for the hybrid device: what Tensor.pin_memory(),
// torch.empty(..., pin_memory=True) and DataLoader(pin_memory=True) allocate.
// The bytes are ordinary host memory (an emulated slot reads host memory
// directly); what makes them pinned is that the runtime knows them, so that
// is_pinned() is true and a non_blocking copy from them is modelled as an
// asynchronous DMA over the host link rather than a synchronous staged copy.

#include <c10/core/Allocator.h>

#include <cstddef>
#include <cstdint>

namespace hybrid::pinned {

// The allocator the accelerator hooks hand out for pinned memory.
c10::Allocator* allocator();

// True when `ptr` lies inside a live pinned allocation.
bool contains(const void* ptr);

struct Stats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;  // made since the start
};
Stats stats();

} // namespace hybrid::pinned
