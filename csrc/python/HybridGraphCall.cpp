#include "python/HybridGraphCall.h"

#include "aten/HybridAlias.h"
#include "runtime/HybridAllocator.h"
#include "runtime/HybridSlots.h"

#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>

namespace py = pybind11;

namespace hybrid {

py::object call_on_slot(c10::DeviceIndex slot, const py::function& fn, py::list args,
                        const std::vector<bool>& slot_outputs) {
  (void)slot_info(slot);  // refuses an index outside the rack
  AliasSet aliases(slot);
  py::list host;
  for (py::handle arg : args) {
    if (THPVariable_Check(arg.ptr())) {
      const at::Tensor& t = THPVariable_Unpack(arg.ptr());
      if (t.defined() && t.is_privateuseone()) {
        TORCH_CHECK(t.device().index() == slot, "a graph compiled for hybrid:", static_cast<int>(slot),
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
    const bool emulated = is_emulated(slot);
    RouteCpuAllocations route(emulated ? slot : static_cast<c10::DeviceIndex>(-1));
    std::optional<c10::DeviceGuard> guard;
    if (!emulated) guard.emplace(execution_device(slot));
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

} // namespace hybrid
