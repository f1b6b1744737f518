// interop._C: the Python face of the runtime. Thin bindings only; the logic
// lives in runtime/ and aten/.

#include "aten/HybridAlias.h"
#include "aten/native/Memory.h"
#include "runtime/HybridAllocator.h"
#include "runtime/HybridGenerator.h"
#include "runtime/HybridGuard.h"
#include "runtime/HybridSlots.h"
#include "runtime/HybridTimeline.h"

#include <torch/csrc/Generator.h>
#include <torch/extension.h>

namespace py = pybind11;

namespace hybrid {
void register_hooks();
int register_cpu_parity();
void bind_layer(pybind11::module& m);

namespace {

std::vector<SlotInfo> parse_slots(const std::vector<std::tuple<std::string, int64_t, std::string>>& rows) {
  std::vector<SlotInfo> slots;
  slots.reserve(rows.size());
  for (const auto& [kind, capacity, backing] : rows) {
    SlotInfo info;
    info.kind = kind;
    info.capacity = capacity;
    if (backing == "emulated") {
      info.backing = Backing::Emulated;
    } else if (backing.rfind("cuda:", 0) == 0) {
      info.backing = Backing::Cuda;
      info.cuda_index = static_cast<c10::DeviceIndex>(std::stoi(backing.substr(5)));
    } else {
      TORCH_CHECK(false, "backing must be 'emulated' or 'cuda:N', got '", backing, "'");
    }
    slots.push_back(std::move(info));
  }
  return slots;
}

py::dict stats_dict(c10::DeviceIndex slot) {
  const SlotStats s = slot_stats(slot);
  py::dict d;
  d["allocated_bytes"] = s.allocated_bytes;
  d["peak_allocated_bytes"] = s.peak_allocated_bytes;
  d["allocated_bytes_total"] = s.allocated_bytes_total;
  d["freed_bytes_total"] = s.freed_bytes_total;
  d["num_allocs"] = s.num_allocs;
  d["num_frees"] = s.num_frees;
  d["live_allocations"] = s.live_allocations;
  d["peak_live_allocations"] = s.peak_live_allocations;
  d["num_ooms"] = s.num_ooms;
  d["capacity"] = slot_info(slot).capacity;
  return d;
}

// Records go to Python as parallel lists (one tuple per record would cost a
// Python object per field); the timeline module turns them into arrays.
py::tuple drain_timeline() {
  timeline::Batch batch = timeline::drain();
  const size_t n = batch.records.size();
  py::list kind(n), flags(n), dtype(n), slot(n), peer(n), name(n), shapes_begin(n),
      n_inputs(n), n_outputs(n), stream(n), peer_stream(n), value(n), measured(n);
  for (size_t i = 0; i < n; ++i) {
    const timeline::Record& r = batch.records[i];
    kind[i] = static_cast<int>(r.kind);
    flags[i] = static_cast<int>(r.flags);
    dtype[i] = r.dtype == c10::ScalarType::Undefined ? std::string()
                                                      : std::string(c10::toString(r.dtype));
    slot[i] = static_cast<int>(r.slot);
    peer[i] = static_cast<int>(r.peer);
    name[i] = r.name;
    shapes_begin[i] = r.shapes_begin;
    n_inputs[i] = r.n_inputs;
    n_outputs[i] = r.n_outputs;
    stream[i] = r.stream;
    peer_stream[i] = r.peer_stream;
    value[i] = r.value;
    measured[i] = r.measured_s;
  }
  py::dict columns;
  columns["kind"] = kind;
  columns["flags"] = flags;
  columns["dtype"] = dtype;
  columns["slot"] = slot;
  columns["peer"] = peer;
  columns["name"] = name;
  columns["shapes_begin"] = shapes_begin;
  columns["n_inputs"] = n_inputs;
  columns["n_outputs"] = n_outputs;
  columns["stream"] = stream;
  columns["peer_stream"] = peer_stream;
  columns["value"] = value;
  columns["measured_s"] = measured;
  return py::make_tuple(columns, batch.shapes);
}

at::Tensor execution_alias(const at::Tensor& t) {
  TORCH_CHECK(t.is_privateuseone(), "expected a hybrid tensor, got one on ", t.device());
  AliasSet aliases(t.device().index());
  return aliases.alias(t, false);
}

} // namespace
} // namespace hybrid

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace hybrid;
  m.doc() = "hybrid-interop runtime: slots, allocator, streams, generators, timeline records";

  register_hooks();
  install_cpu_routing();
  const int parity_ops = register_cpu_parity();
  m.attr("_cpu_parity_ops") = parity_ops;

  bind_layer(m);

  m.def("_install_slots", [](const std::vector<std::tuple<std::string, int64_t, std::string>>& rows) {
    install_slots(parse_slots(rows));
  }, "Install the slot table of the current rack (refused while hybrid tensors are alive).");
  m.def("_slot_count", []() { return static_cast<int>(slot_count()); });
  m.def("_slot_label", [](int i) { return slot_label(static_cast<c10::DeviceIndex>(i)); });
  m.def("_live_allocations", &live_allocation_summary);

  m.def("_current_slot", []() { return static_cast<int>(current_slot()); });
  m.def("_set_current_slot", [](int i) { set_current_slot(static_cast<c10::DeviceIndex>(i)); });
  m.def("_current_stream_id", [](int i) {
    (void)slot_info(static_cast<c10::DeviceIndex>(i));
    return current_stream_id(static_cast<c10::DeviceIndex>(i));
  });

  m.def("_new_stream_id", [](int i) { return new_stream(static_cast<c10::DeviceIndex>(i)).id(); });
  m.def("_set_stream", [](int i, int64_t id) {
    HybridGuardImpl().exchangeStream(c10::Stream(
        c10::Stream::UNSAFE, c10::Device(c10::kPrivateUse1, static_cast<c10::DeviceIndex>(i)), id));
  });

  m.def("_event_elapsed_ms", [](uintptr_t start, uintptr_t end) {
    // torch.Event.elapsed_time accepts only exact torch.Event peers; torch.hybrid.Event
    // subclasses it (FSDP2 hands it to Stream.wait_event) and measures through here.
    return HybridGuardImpl().elapsedTime(reinterpret_cast<void*>(start), reinterpret_cast<void*>(end), -1);
  });

  m.def("_memory_stats", [](int i) { return stats_dict(static_cast<c10::DeviceIndex>(i)); });
  m.def("_reset_peak_stats", [](int i) { reset_peak_stats(static_cast<c10::DeviceIndex>(i)); });
  m.def("_reset_accumulated_stats", [](int i) {
    reset_accumulated_stats(static_cast<c10::DeviceIndex>(i));
  });

  m.def("_default_generator", [](int i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(i))));
  });

  m.def("_execution_alias", &execution_alias,
        "A tensor on the slot's execution device (CPU for emulated) over the same bytes.");
  m.def("_is_slot_memory", [](const at::Tensor& t) {
    return t.has_storage() && is_slot_memory(t.storage().data_ptr());
  });

  m.def("_timeline_enabled", &timeline::enabled);
  m.def("_set_timeline_enabled", &timeline::set_enabled);
  m.def("_drain_timeline", &drain_timeline);
  m.def("_op_name", &timeline::name_of);
  m.def("_record_marker", [](int slot, int64_t stream) {
    return timeline::record_marker(static_cast<c10::DeviceIndex>(slot), stream);
  });
  m.def("_record_wait", [](int slot, int64_t stream, int64_t marker) {
    timeline::record_wait(static_cast<c10::DeviceIndex>(slot), stream, marker);
  });
  m.def("_record_copy", [](int src, int dst, int64_t nbytes) {
    timeline::record_copy(static_cast<c10::DeviceIndex>(src), static_cast<c10::DeviceIndex>(dst),
                          nbytes, c10::ScalarType::Byte, false);
  });
  m.def("_set_elapsed_hook", [](py::function fn) {
    // Kept for the life of the process: destroying a Python object during
    // interpreter shutdown, from a static destructor, would crash.
    auto* held = new py::function(std::move(fn));
    timeline::set_elapsed_hook([held](int64_t a, int64_t b) {
      py::gil_scoped_acquire gil;
      return (*held)(a, b).cast<double>();
    });
  });
}
