#include "python/HybridGraphCall.h"

#include "aten/HybridAlias.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridSlots.h"
#include "model/HybridTimeline.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>

namespace py = pybind11;

namespace hybrid {
namespace {

// The call on a slot this thread is inside: its kernels' records name its rack.
struct RunningCall {
  const SlotTable* rack = nullptr;
  c10::DeviceIndex slot = -1;
};
thread_local RunningCall t_running;

class Running {
 public:
  Running(const SlotTable& rack, c10::DeviceIndex slot) : previous_(t_running) { t_running = {&rack, slot}; }
  ~Running() { t_running = previous_; }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  RunningCall previous_;
};

} // namespace

py::object call_on_slot(c10::DeviceIndex slot, const py::function& fn, py::list args,
                        const std::vector<bool>& slot_outputs, const std::string& op) {
  // A strong reference of our own: fn runs Python, and the thread's view of the
  // current table (what current_table() returns a reference to) moves on if
  // another thread installs a rack meanwhile.
  const SlotTablePtr rack = current_table();
  // Every tensor's rack first, as the fallback does: a tensor of a retired rack
  // gets the rack error even where its index is no slot of the current one.
  for (py::handle arg : args) {
    if (THPVariable_Check(arg.ptr())) {
      const at::Tensor& t = THPVariable_Unpack(arg.ptr());
      if (t.defined() && t.is_privateuseone()) check_rack(t, *rack, op);
    }
  }
  (void)rack->slot(slot);  // refuses an index outside the rack
  AliasSet aliases(rack, slot, op);
  py::list host;
  for (py::handle arg : args) {
    if (THPVariable_Check(arg.ptr())) {
      const at::Tensor& t = THPVariable_Unpack(arg.ptr());
      if (t.defined() && t.is_privateuseone()) {
        TORCH_CHECK(t.device().index() == slot, op, " on hybrid:", static_cast<int>(slot),
                    " was called with a tensor on hybrid:", static_cast<int>(t.device().index()));
        host.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(aliases.alias(t, false))));
        continue;
      }
    }
    host.append(arg);
  }
  args.attr("clear")();

  py::object result;
  {
    SlotExecution execution(rack, slot, rack->is_emulated(slot), execution_device(*rack, slot));
    Running running(*rack, slot);
    result = fn(host);
  }

  py::list mapped;
  size_t i = 0;
  for (py::handle out : result) {
    if (i < slot_outputs.size() && slot_outputs[i] && THPVariable_Check(out.ptr())) {
      mapped.append(py::reinterpret_steal<py::object>(
          THPVariable_Wrap(aliases.to_hybrid(THPVariable_Unpack(out.ptr())))));
    } else {
      mapped.append(out);
    }
    ++i;
  }
  if (py::isinstance<py::list>(result)) return std::move(mapped);
  return py::tuple(mapped);
}

bool record_kernel(c10::DeviceIndex slot, int64_t launch) {
  const RunningCall running = t_running;
  TORCH_CHECK(running.rack != nullptr, "a kernel launch on hybrid:", static_cast<int>(slot),
              " was recorded outside a call on its slot (_C._call_on_slot): its rack is unknown");
  TORCH_CHECK(slot == running.slot, "a kernel launch on hybrid:", static_cast<int>(slot),
              " was recorded inside a call on hybrid:", static_cast<int>(running.slot));
  return timeline::record_kernel(running.rack->generation(), slot, launch);
}

} // namespace hybrid
