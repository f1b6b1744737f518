#pragma once
// A compiled graph called on a slot: the graph was compiled for the slot's
// execution device (CPU for an emulated slot, the GPU behind a backed one), so
// it runs on execution-device aliases of the slot's tensors, exactly as an
// eager op does (aten/HybridFallback.cpp).

#include <torch/extension.h>

#include <vector>

namespace hybrid {

// Calls fn(aliases) where `aliases` is `args` (a list, cleared afterwards as
// Inductor's boxed calling convention expects) with each of the slot's tensors
// replaced by an alias of the same bytes. On an emulated slot the allocations
// fn makes (buffers, outputs, kernel workspace) are drawn from the slot and
// counted against it. Results whose `slot_outputs` flag is set are returned as
// the slot's tensors (the original tensor, a view of an argument's storage, or
// the new storage relabelled); the others are returned as they are.
pybind11::object call_on_slot(c10::DeviceIndex slot, const pybind11::function& fn, pybind11::list args,
                              const std::vector<bool>& slot_outputs);

} // namespace hybrid
