#pragma once
// A compiled graph (or a Triton launch) called on a slot: it was compiled for
// the slot's execution device (CPU for an emulated slot, the GPU behind a
// backed one), so it runs on execution-device aliases of the slot's tensors,
// exactly as an eager op does (aten/HybridFallback.cpp), on the current rack.

#include <torch/csrc/utils/pybind.h>

#include <string>
#include <vector>

namespace hybrid {

// Calls fn(aliases) on `slot` of the current rack, where `aliases` is `args` (a
// list, cleared afterwards as Inductor's boxed calling convention expects) with
// each of the slot's tensors replaced by an alias of the same bytes. A tensor
// of another rack (a retired one) is refused with the rack error, naming `op`,
// before anything runs. On an emulated slot the allocations fn makes (buffers,
// outputs, kernel workspace) are drawn from the slot and counted against it.
// Results whose `slot_outputs` flag is set are returned as the slot's tensors
// (the original tensor, a view of an argument's storage, or the new storage
// relabelled); the others are returned as they are. While fn runs, kernel
// records (record_kernel) go to this rack's timeline.
pybind11::object call_on_slot(c10::DeviceIndex slot, const pybind11::function& fn, pybind11::list args,
                              const std::vector<bool>& slot_outputs, const std::string& op);

// Queues a kernel record for a launch made inside call_on_slot on this thread,
// on that call's rack and slot (even if another thread installed a rack since).
// `launch` identifies the launch's description on the Python side. Returns
// false (nothing queued) while recording is off.
bool record_kernel(c10::DeviceIndex slot, int64_t launch);

} // namespace hybrid
