// interop._C: the Python face of the runtime. Thin bindings only; the logic
// lives in runtime/ and aten/.

#include "aten/HybridAlias.h"
#include "aten/native/Memory.h"
#include "python/HybridGraphCall.h"
#include "runtime/HybridAccounting.h"
#include "runtime/HybridAllocator.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridGenerator.h"
#include "runtime/HybridGuard.h"
#include "runtime/HybridSlots.h"
#include "model/HybridTimeline.h"

#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace hybrid {
void register_hooks();
int register_cpu_parity();
void bind_layer(pybind11::module& m);
namespace timeline {
void bind_timeline(pybind11::module& m);
}
void bind_fused_collectives(pybind11::module& m);
int register_foreach();
namespace unboxed {
const std::vector<std::string>& register_unboxed();
bool set_enabled(bool on);
} // namespace unboxed

namespace {

// Rows are (kind, capacity in bytes, cuda device index or -1 for emulated):
// Python has parsed the backing already (devices.Backing).
std::vector<SlotInfo> slot_rows(const std::vector<std::tuple<std::string, int64_t, int>>& rows) {
  std::vector<SlotInfo> slots;
  slots.reserve(rows.size());
  for (const auto& [kind, capacity, cuda_index] : rows) {
    SlotInfo info;
    info.kind = kind;
    info.capacity = capacity;
    info.backing = cuda_index < 0 ? Backing::Emulated : Backing::Cuda;
    info.cuda_index = static_cast<c10::DeviceIndex>(cuda_index);
    slots.push_back(std::move(info));
  }
  return slots;
}

// c10's DeviceStats under torch.cuda.memory_stats' keys
// ("allocated_bytes.all.current", ...), plus the slot's capacity.
py::dict stats_dict(const SlotTable& table, c10::DeviceIndex slot) {
  using c10::CachingAllocator::Stat;
  using c10::CachingAllocator::StatArray;
  const auto stats = table.account(slot).stats();
  py::dict out;
  auto put_stat = [&out](const std::string& prefix, const Stat& stat) {
    out[py::str(prefix + ".current")] = stat.current;
    out[py::str(prefix + ".peak")] = stat.peak;
    out[py::str(prefix + ".allocated")] = stat.allocated;
    out[py::str(prefix + ".freed")] = stat.freed;
  };
  // c10::CachingAllocator::StatType's order.
  static constexpr const char* kPools[] = {"all", "small_pool", "large_pool"};
  auto put_array = [&](const char* family, const StatArray& array) {
    for (size_t pool = 0; pool < array.size(); ++pool) {
      put_stat(std::string(family) + "." + kPools[pool], array[pool]);
    }
  };
  put_array("allocation", stats.allocation);
  put_array("segment", stats.segment);
  put_array("active", stats.active);
  put_array("inactive_split", stats.inactive_split);
  put_array("allocated_bytes", stats.allocated_bytes);
  put_array("reserved_bytes", stats.reserved_bytes);
  put_array("active_bytes", stats.active_bytes);
  put_array("inactive_split_bytes", stats.inactive_split_bytes);
  put_array("requested_bytes", stats.requested_bytes);
  put_stat("oversize_allocations", stats.oversize_allocations);
  put_stat("oversize_segments", stats.oversize_segments);
  out["num_alloc_retries"] = stats.num_alloc_retries;
  out["num_ooms"] = stats.num_ooms;
  out["num_sync_all_streams"] = stats.num_sync_all_streams;
  out["num_device_alloc"] = stats.num_device_alloc;
  out["num_device_free"] = stats.num_device_free;
  out["max_split_size"] = stats.max_split_size;
  out["capacity"] = table.slot(slot).capacity;
  return out;
}

// `op` says what the alias is for, in the error for a tensor of a retired rack.
at::Tensor execution_alias(const at::Tensor& t, const std::string& op) {
  TORCH_CHECK(t.is_privateuseone(), "expected a hybrid tensor, got one on ", t.device());
  const SlotTablePtr& rack = current_table();
  check_rack(t, *rack, op);
  AliasSet aliases(rack, t.device().index(), op);
  return aliases.alias(t, false);
}

} // namespace
} // namespace hybrid

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace hybrid;
  m.doc() = "hybrid-interop runtime: slots, allocator, streams, generators, timeline records";

  register_hooks();
  install_cpu_routing();
  // The hottest ops' unboxed kernels (HybridUnboxed.cpp), before CPU parity would send them to the boxed
  // fallback; _set_unboxed(False) sends them there instead, the reference the tests compare them with.
  m.attr("_unboxed_ops") = unboxed::register_unboxed();
  m.def("_set_unboxed", &unboxed::set_enabled, "Whether the hottest ops take their unboxed kernels; returns the "
        "previous setting.");
  const int parity_ops = register_cpu_parity();
  m.attr("_cpu_parity_ops") = parity_ops;
  m.attr("_foreach_ops") = register_foreach();

  bind_layer(m);
  timeline::bind_timeline(m);
  bind_fused_collectives(m);

  m.attr("MAX_SLOTS") = static_cast<int>(kMaxSlots);
  {
    // The record vocabulary of the timeline, exported so that Python never copies these numbers.
    using timeline::RecordKind;
    py::dict kinds;
    kinds["op"] = static_cast<int>(RecordKind::Op);
    kinds["copy"] = static_cast<int>(RecordKind::Copy);
    kinds["marker"] = static_cast<int>(RecordKind::Marker);
    kinds["wait"] = static_cast<int>(RecordKind::Wait);
    kinds["kernel"] = static_cast<int>(RecordKind::Kernel);
    kinds["release"] = static_cast<int>(RecordKind::Release);
    m.attr("RECORD_KINDS") = kinds;
    py::dict flags;
    flags["causal"] = static_cast<int>(timeline::kCausal);
    flags["measured"] = static_cast<int>(timeline::kMeasured);
    flags["async"] = static_cast<int>(timeline::kAsync);
    flags["sparse"] = static_cast<int>(timeline::kSparse);
    m.attr("RECORD_FLAGS") = flags;
  }

  py::class_<SlotTable, SlotTablePtr>(m, "SlotTable",
      "The slots of one rack and their memory accounting (one per interop.Rack). It lives as long as its "
      "Rack object or any allocation made on it.")
      .def(py::init([](std::string name, const std::vector<std::tuple<std::string, int64_t, int>>& rows) {
             return std::make_shared<SlotTable>(std::move(name), slot_rows(rows));
           }),
           py::arg("name"), py::arg("rows"))
      .def_property_readonly("generation", &SlotTable::generation)
      .def_property_readonly("name", &SlotTable::name)
      .def("__len__", [](const SlotTable& t) { return static_cast<int>(t.size()); })
      .def("label", [](const SlotTable& t, int i) { return t.label(static_cast<c10::DeviceIndex>(i)); })
      .def("memory_stats", [](const SlotTable& t, int i) { return stats_dict(t, static_cast<c10::DeviceIndex>(i)); })
      .def("reset_peak_stats", [](const SlotTable& t, int i) {
        t.account(static_cast<c10::DeviceIndex>(i)).reset_peak();
      })
      .def("reset_accumulated_stats", [](const SlotTable& t, int i) {
        t.account(static_cast<c10::DeviceIndex>(i)).reset_accumulated();
      })
      .def("set_memory_limit", [](const SlotTable& t, int i, int64_t bytes) {
        t.account(static_cast<c10::DeviceIndex>(i)).set_limit(bytes);
      }, "Bytes the slot may hold in this process, below its capacity (negative: the capacity).")
      .def("memory_limit", [](const SlotTable& t, int i) {
        return t.account(static_cast<c10::DeviceIndex>(i)).limit();
      })
      .def("peaks", [](const SlotTable& t, int i) { return t.account(static_cast<c10::DeviceIndex>(i)).peaks(); },
           "The slot's peak counters, for restore_peaks.")
      .def("restore_peaks", [](const SlotTable& t, int i, const std::vector<int64_t>& saved) {
        t.account(static_cast<c10::DeviceIndex>(i)).restore_peaks(saved);
      }, "Each peak becomes the larger of the saved one and the current value.");

  m.def("_install", [](const SlotTablePtr& table) { install(table); },
        "Make a rack's slot table current (the previous one is retired, its allocations intact).");
  m.def("_current_generation", []() { return current_table()->generation(); });
  m.def("_live_slot_tables", &live_slot_tables,
        "Slot tables alive: held by a Rack, installed, or kept by allocations of a retired rack.");
  m.def("_slot_count", []() { return static_cast<int>(slot_count()); });

  m.def("_current_slot", []() { return static_cast<int>(current_slot()); });
  m.def("_set_current_slot", [](int i) { set_current_slot(static_cast<c10::DeviceIndex>(i)); });
  m.def("_default_slot", []() { return static_cast<int>(default_slot()); },
        "The slot of every thread that has not chosen one (CUDA's device 0).");
  m.def("_set_default_slot", [](int i) { set_default_slot(static_cast<c10::DeviceIndex>(i)); });
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

  m.def("_default_generator", [](int i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(static_cast<c10::DeviceIndex>(i))));
  });
  m.def("_slot_cpu_generator", [](int i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_Wrap(cpu_generator_for(std::nullopt, static_cast<c10::DeviceIndex>(i))));
  }, "The CPU generator behind a slot's default generator: what a CPU kernel run for the slot draws from.");

  m.def("_execution_alias", &execution_alias, py::arg("tensor"), py::arg("op") = "a collective",
        "A tensor on the slot's execution device (CPU for emulated) over the same bytes.");

  m.def("_shared_on_slot", [](const at::Tensor& source, int slot) {
    return shared_on_slot(source, static_cast<c10::DeviceIndex>(slot));
  }, py::arg("source"), py::arg("slot"),
  "A tensor on `slot` over `source`'s bytes (another emulated slot's), charged on `slot` as its own allocation.");
  m.def("_timeline_enabled", &timeline::enabled);
  m.def("_set_timeline_enabled", &timeline::set_enabled);
  m.def("_op_name", &timeline::name_of);
  m.def("_call_on_slot", [](int slot, const py::function& fn, py::list args, const std::vector<bool>& outputs,
                            const std::string& op) {
    return call_on_slot(static_cast<c10::DeviceIndex>(slot), fn, std::move(args), outputs, op);
  }, py::arg("slot"), py::arg("fn"), py::arg("args"), py::arg("slot_outputs"), py::arg("op"),
  "Call a graph compiled for the slot's execution device on aliases of the slot's tensors (current rack).");
  m.def("_record_kernel", [](int slot, int64_t launch) {
    return record_kernel(static_cast<c10::DeviceIndex>(slot), launch);
  }, "Queue a kernel record, inside _call_on_slot, on its rack and the slot's current stream; `launch` "
     "identifies its description.");
  m.def("_pending_records", &timeline::pending, "Records appended and not drained yet.");
  m.def("_set_drain_hook", [](py::function fn, size_t threshold) {
    auto* held = new py::function(std::move(fn));  // kept for the life of the process, as below
    timeline::set_drain_hook([held]() {
      if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
      py::gil_scoped_acquire gil;
      try {
        (*held)();
      } catch (py::error_already_set& e) {
        // An interrupt (Ctrl-C, a stopping signal's exception: not an Exception) belongs to the script:
        // it leaves from the op that crossed the threshold, as it would from any other line.
        if (!e.matches(PyExc_Exception)) throw;
        // The op that crossed the threshold ran and stays done; a failure to place is the
        // timeline's, reported (sys.unraisablehook) and met again at the next clock read.
        e.discard_as_unraisable("interop.session.drain (placing the timeline's pending records)");
      }
    }, threshold);
  }, py::arg("hook"), py::arg("threshold"),
  "Place pending records from the recording thread whenever `threshold` are pending (0: never).");
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
