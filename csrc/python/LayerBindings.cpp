// interop._C bindings of the CUDA layer's runtime parts: the op ledger, device
// fidelity (the capability checks' hook and masks), pinned memory, named-range markers, the CUDA-only
// ops an emulated slot refuses and the op that last failed on a slot.

#include "aten/HybridFidelity.h"
#include "aten/HybridRefusals.h"
#include "runtime/HybridHostAllocator.h"
#include "model/HybridLedger.h"
#include "runtime/HybridSlots.h"
#include "model/HybridTimeline.h"

#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace hybrid {

void bind_layer(py::module& m) {
  m.def("_ledger", []() {
    py::list rows;
    for (const auto& r : ledger::snapshot()) {
      rows.append(py::make_tuple(r.op, r.rack, r.rack_name, r.slot, r.kind, r.path, r.count));
    }
    return rows;
  }, "(op, rack generation, rack name, slot, kind, path, count) for every op that ran on a slot; path: "
     "0 dedicated, 1 CPU kernel, 2 CPU composite, 3 CUDA.");
  m.def("_ledger_reset", &ledger::reset);

  m.def("_fidelity_set_mask", [](int slot, const std::vector<at::ScalarType>& dtypes) {
    fidelity::set_mask(static_cast<c10::DeviceIndex>(slot), dtypes);
  }, "The dtypes whose ops the slot's capability table must be asked about.");
  m.def("_fidelity_clear_masks", &fidelity::clear_masks, "No dtype concerns any slot.");
  m.def("_fidelity_set_hook", [](py::function fn) {
    // Kept for the life of the process: destroying a Python object during
    // interpreter shutdown, from a static destructor, would crash.
    auto* held = new py::function(std::move(fn));
    fidelity::set_hook([held](const std::string& op, uint64_t rack, c10::DeviceIndex slot, c10::ScalarType dtype) {
      py::gil_scoped_acquire gil;
      py::tuple verdict = (*held)(op, rack, static_cast<int>(slot), dtype);
      return std::make_pair(static_cast<fidelity::Decision>(verdict[0].cast<int>()),
                            verdict[1].cast<std::string>());
    });
  });
  m.def("_fidelity_reset", &fidelity::reset_decisions, "Forget every cached decision.");
  m.def("_fidelity_counts", []() {
    py::list rows;
    for (const auto& [op, rack, slot, dtype, n] : fidelity::counts()) {
      rows.append(py::make_tuple(op, rack, slot, dtype, n));
    }
    return rows;
  }, "(op, rack generation, slot, torch.dtype, count) of every divergence met.");
  m.def("_fidelity_reset_counts", &fidelity::reset_counts);

  m.def("_pinned_stats", []() {
    const pinned::Stats s = pinned::stats();
    py::dict d;
    d["live_bytes"] = s.live_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["allocations"] = s.allocations;
    return d;
  }, "Pinned host memory handed out by the hybrid device's pinned allocator.");
  m.def("_record_marker", [](int slot, int64_t stream) {
    // torch.hybrid.nvtx: a range's ends are markers on the slot's stream (the modelled clock there).
    const SlotTablePtr& rack = current_table();
    rack->slot(static_cast<c10::DeviceIndex>(slot));  // a clear error for an index the rack lacks
    return timeline::record_marker(rack->generation(), static_cast<c10::DeviceIndex>(slot), stream);
  }, "A timeline marker on (slot, stream) of the current rack; returns its id (process-wide, never reused).");
  m.def("_release_marker", [](uint64_t generation, int64_t marker) {
    timeline::record_release(generation, marker);
  }, "Marker `marker` of the rack with this generation is not read again (the timeline forgets it).");
  m.def("_set_cuda_only_ops", [](std::unordered_map<std::string, std::string> instead) {
    refusals::set_cuda_only(std::move(instead));
  }, "The ops torch implements for CUDA only, each with what to use instead on an emulated slot.");
  m.def("_last_failure", &refusals::last_failure,
        "(op, slot, message) of the last op that raised on a slot; op is '' when none did.");
  m.def("_clear_last_failure", &refusals::clear_last_failure);
  m.def("_is_pinned_ptr", [](uintptr_t ptr) { return pinned::contains(reinterpret_cast<const void*>(ptr)); });
}

} // namespace hybrid
