// interop._C bindings of the timeline's placing half (model/HybridPlacer.h): the placer each
// interop.timelines.Timeline owns, the cost table Python fills, and the drain that places pending records.

#include "model/HybridPlacer.h"
#include "model/HybridTimeline.h"

#include <torch/csrc/Dtype.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

// In hybrid::timeline rather than behind a `using namespace timeline`, which would carry into the files
// built after this one in the same unity translation unit (setup.py).
namespace hybrid::timeline {
namespace {

const char* const kKindNames[] = {"op", "copy", "kernel", "collective"};

py::str dtype_str(c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Undefined) return py::str("");
  return py::str(torch::getTHPDtype(dtype)->name);
}

py::tuple shapes_tuple(const int64_t*& pos, uint32_t count) {
  py::tuple out(count);
  for (uint32_t i = 0; i < count; ++i) {
    const int64_t ndim = *pos++;
    py::tuple shape(ndim);
    for (int64_t d = 0; d < ndim; ++d) shape[d] = py::int_(*pos++);
    out[i] = std::move(shape);
  }
  return out;
}

py::dict totals_dict(const Totals& t) {
  py::dict d;
  d["records"] = t.records;
  d["makespan_ps"] = t.makespan_ps;
  auto per_slot = [](const auto& ordered) {
    py::dict out;
    for (const auto& [k, v] : ordered.items) out[py::int_(k)] = py::cast(v);
    return out;
  };
  d["busy_ps"] = per_slot(t.busy_ps);
  d["flops"] = per_slot(t.flops);
  py::dict by_dtype;
  for (const auto& [slot, dtypes] : t.flops_by_dtype.items) {
    py::dict inner;
    for (const auto& [dtype, f] : dtypes.items) inner[py::str(name_of(dtype))] = f;
    by_dtype[py::int_(slot)] = inner;
  }
  d["flops_by_dtype"] = by_dtype;
  d["ops"] = per_slot(t.ops);
  d["kernels"] = per_slot(t.kernels);
  d["kernel_ps"] = per_slot(t.kernel_ps);
  d["by_default"] = per_slot(t.by_default);
  d["own"] = per_slot(t.own);
  py::dict links;
  for (const auto& [link, f] : t.links.items) links[py::str(name_of(link))] = py::make_tuple(f[0], f[1]);
  d["links"] = links;
  py::dict groups;
  for (const auto& [key, f] : t.link_groups.items) {
    groups[py::make_tuple(name_of(key.first), py::tuple(py::cast(slots_of(key.second))))] = py::make_tuple(f[0], f[1]);
  }
  d["link_groups"] = groups;
  py::dict per_op;
  for (const auto& [key, s] : t.per_op.items) {
    const auto& [slot, stream, kind, name] = key;
    per_op[py::make_tuple(slot, stream, kKindNames[kind], name_of(name))] =
        py::make_tuple(s.count, s.duration_ps, s.flops, s.bytes, s.by_default, s.first_start_ps, s.last_end_ps);
  }
  d["per_op"] = per_op;
  return d;
}

// One held record as a tuple, for interop.timelines to make a TimelineRecord of.
py::tuple record_tuple(const Placer& placer, const Placed& p) {
  const int64_t* pos = placer.shapes_of(p);
  py::tuple ins = shapes_tuple(pos, p.n_inputs);
  py::tuple outs = shapes_tuple(pos, p.n_outputs);
  return py::make_tuple(kKindNames[static_cast<int>(p.kind)], static_cast<int>(p.slot), p.stream,
                        p.peer == kNoPeer ? py::object(py::none()) : py::object(py::int_(static_cast<int>(p.peer))),
                        name_of(p.name), ins, outs, dtype_str(p.dtype), p.start_ps, p.duration_ps, p.cost,
                        std::isnan(p.measured_s) ? py::object(py::none()) : py::object(py::float_(p.measured_s)),
                        static_cast<int>(p.flags));
}

} // namespace

void bind_timeline(py::module& m) {
  using Lock = std::lock_guard<std::recursive_mutex>;
  py::class_<Placer, std::shared_ptr<Placer>>(m, "_TimelinePlacer",
      "The placing half of one rack's timeline (clocks, window, totals); interop.timelines.Timeline owns it.")
      .def(py::init<uint64_t, std::vector<int32_t>, std::vector<bool>>(), py::arg("rack"), py::arg("kinds"),
           py::arg("projected"))
      .def("set_window", [](Placer& p, std::optional<int64_t> limit, bool auto_fold, bool immediate) {
        Lock lock(placer_mutex());
        p.set_window(limit, auto_fold, immediate);
      }, py::arg("limit"), py::arg("auto_fold"), py::arg("immediate"))
      .def_property_readonly("placed", [](Placer& p) { Lock lock(placer_mutex()); return p.placed(); })
      .def_property_readonly("first", [](Placer& p) { Lock lock(placer_mutex()); return p.first(); },
                             "The placed index of the oldest record held.")
      .def("records", [](Placer& p, int64_t begin) {
        Lock lock(placer_mutex());
        py::list out;
        for (size_t i = static_cast<size_t>(std::max<int64_t>(0, begin - p.first())); i < p.held_count(); ++i) {
          out.append(record_tuple(p, p.held_at(i)));
        }
        return out;
      }, py::arg("begin"), "The held records placed at index `begin` and after, as tuples.")
      .def("fold", [](Placer& p, size_t n) { Lock lock(placer_mutex()); p.fold(n); })
      .def("totals", [](Placer& p, bool all) {
        Totals t;
        {
          Lock lock(placer_mutex());
          t = all ? p.all() : p.folded();
        }
        return totals_dict(t);
      }, py::arg("all"), "The folded records' totals, or (all) theirs plus the held records'.")
      .def("busy_by_slot", [](Placer& p) { Lock lock(placer_mutex()); return p.busy_by_slot(); })
      .def("clocks", [](Placer& p) {
        Lock lock(placer_mutex());
        py::dict out;
        for (const auto& [k, t] : p.clocks()) out[py::make_tuple(k.first, k.second)] = t;
        return out;
      })
      .def("clock", [](Placer& p, int slot, int64_t stream) { Lock lock(placer_mutex()); return p.clock(slot, stream); })
      .def("raise_clock", [](Placer& p, int slot, int64_t stream, int64_t ps) {
        Lock lock(placer_mutex());
        p.raise_clock(slot, stream, ps);
      })
      .def("now_ps", [](Placer& p, int slot) {
        Lock lock(placer_mutex());
        int64_t most = 0;
        for (const auto& [k, t] : p.clocks()) {
          if (slot < 0 || k.first == slot) most = std::max(most, t);
        }
        return most;
      }, py::arg("slot") = -1)
      .def("markers", [](Placer& p) {
        Lock lock(placer_mutex());
        py::dict out;
        for (const auto& [id, m] : p.markers()) {
          out[py::int_(id)] = py::make_tuple(std::get<0>(m), std::get<1>(m), std::get<2>(m));
        }
        return out;
      })
      .def_property_readonly("host_floor_ps", [](Placer& p) { Lock lock(placer_mutex()); return p.host_floor_ps(); })
      .def("push_hosts", [](Placer& p) { Lock lock(placer_mutex()); p.push_hosts(); })
      .def("pop_hosts", [](Placer& p) { Lock lock(placer_mutex()); p.pop_hosts(); })
      .def("place_collective", [](Placer& p, const std::vector<int>& slots, const std::vector<int64_t>& streams,
                                  int64_t duration_ps, int64_t ready_ps, int32_t cost) {
        Lock lock(placer_mutex());
        int64_t start = ready_ps;
        for (size_t i = 0; i < slots.size(); ++i) start = std::max(start, p.clock(slots[i], streams[i]));
        for (size_t i = 0; i < slots.size(); ++i) p.raise_clock(slots[i], streams[i], start + duration_ps);
        p.append_at(PlacedKind::Collective, slots.at(0), streams.at(0), start, duration_ps, cost);
        return start;
      }, "Start a collective on every participant's stream when all are free (and not before ready_ps).")
      .def("append_at", [](Placer& p, int slot, int64_t stream, int64_t start_ps, int64_t duration_ps, int32_t cost) {
        Lock lock(placer_mutex());
        p.append_at(PlacedKind::Collective, slot, stream, start_ps, duration_ps, cost);
      }, "A transfer between processes, at the start both ends agreed on.")
      .def("replay", [](Placer& p, int64_t begin, int64_t end, const std::vector<int>& from,
                        const std::vector<int>& to, const std::vector<int64_t>& to_streams) {
        Lock lock(placer_mutex());
        return p.replay(begin, end, from, to, std::vector<c10::StreamId>(to_streams.begin(), to_streams.end()));
      }, py::arg("begin"), py::arg("end"), py::arg("from_slots"), py::arg("to_slots"), py::arg("to_streams"),
      "Place the ops, kernels and within-slot copies of records [begin, end) again, slot from_slots[i]'s on "
      "to_slots[i]'s stream to_streams[i], at the same costs (a data-parallel replica's repeat of another's work).");

  m.def("_timeline_add_cost", [](int64_t duration_ps, double flops, double bytes, const std::string& name,
                                 const std::string& dtype, const std::string& link, const std::vector<int>& participants,
                                 bool by_default, bool projected) {
    Cost c;
    c.duration_ps = duration_ps;
    c.flops = flops;
    c.bytes = bytes;
    c.name = name.empty() ? 0 : intern_string(name);
    c.dtype = intern_string(dtype);
    c.link = link.empty() ? 0 : intern_string(link);
    Lock lock(placer_mutex());
    c.participants = participants.empty() ? 0 : intern_slots(participants);
    c.by_default = by_default;
    c.projected = projected;
    return add_cost(c);
  }, py::arg("duration_ps"), py::arg("flops"), py::arg("bytes"), py::arg("name"), py::arg("dtype"), py::arg("link"),
     py::arg("participants"), py::arg("by_default"), py::arg("projected"),
  "Add a priced item to the cost table (what devices.cost said); returns its id.");
  m.def("_timeline_clear_costs", []() {
    Lock lock(placer_mutex());
    clear_costs();
  }, "Forget which ops and copies the cost table has priced (the cost model's caches were cleared).");
  m.def("_timeline_discard_pending", []() { return timeline::drain().records.size(); },
  "Drop the records waiting in the log, unplaced (a test sweep that only exercises the recording); returns how many.");
  m.def("_timeline_place_pending", [](py::function resolve) {
    place_pending([&](const Record& r, const int64_t* shapes) {
      py::gil_scoped_acquire gil;
      const int64_t* pos = shapes;
      py::tuple ins, outs;
      if (r.kind == RecordKind::Op) {
        ins = shapes_tuple(pos, r.n_inputs);
        outs = shapes_tuple(pos, r.n_outputs);
      }
      py::object id = resolve(static_cast<int>(r.kind), r.rack, static_cast<int>(r.slot), static_cast<int>(r.peer),
                              name_of(r.name), r.value, dtype_str(r.dtype), static_cast<int>(r.flags), ins, outs);
      return id.cast<int32_t>();
    });
  }, py::arg("resolve"),
  "Place every pending record; `resolve(kind, rack, slot, peer, name, value, dtype, flags, ins, outs)` returns the "
  "cost id of one the table has no cost for.");
}

} // namespace hybrid::timeline
