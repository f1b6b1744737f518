#pragma once
// What every op that runs on a slot's bytes does before its kernel, shared by
// the boxed fallback (HybridFallback.cpp) and the unboxed kernels of the
// hottest ops (HybridUnboxed.cpp), so that both refuse, check and count alike:
// which slot the op runs on (every hybrid tensor on one slot of the current
// rack, no host tensor that CUDA would refuse), then the slot's admission of
// the op (a CUDA-only op refused on an emulated slot, device fidelity, the op
// ledger).

#include "aten/HybridAlias.h"
#include "runtime/HybridSlots.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <optional>

namespace hybrid {

// Walks an op's tensors once: the slot it runs on, the first host tensor that
// is not a 0-d scalar, and the dtype of the first hybrid tensor. Refuses a
// tensor of another rack (it never runs on, nor is counted on, a slot of the
// current one) and tensors on two slots.
struct Placement {
  const SlotTable& rack;
  c10::DeviceIndex slot = -1;
  std::optional<c10::Device> host_tensor;
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  void note_device(const c10::OperatorHandle& op, c10::DeviceIndex index) {
    if (slot < 0) {
      slot = index;
    } else if (index != slot) {
      raise_two_slots(op, index);
    }
  }

  void note_tensor(const c10::OperatorHandle& op, const at::Tensor& t) {
    if (!t.defined()) return;
    if (t.is_privateuseone()) {
      check_rack(t, rack, op.operator_name().name);
      note_device(op, t.device().index());
      if (dtype == c10::ScalarType::Undefined) dtype = t.scalar_type();
    } else if (t.dim() > 0 && !host_tensor) {
      host_tensor = t.device();
    }
  }

  // After the walk: refuses a host tensor beside the slot's, as CUDA does, unless `host_tensors_accepted`.
  void check_host_tensor(const c10::OperatorHandle& op, bool host_tensors_accepted) const {
    if (C10_UNLIKELY(slot >= 0 && host_tensor && !host_tensors_accepted)) raise_host_tensor(op);
  }

 private:
  [[noreturn]] C10_NOINLINE void raise_two_slots(const c10::OperatorHandle& op, c10::DeviceIndex index) const;
  [[noreturn]] C10_NOINLINE void raise_host_tensor(const c10::OperatorHandle& op) const;
};

// Once the slot is known: refuses a CUDA-only op on an emulated slot, checks
// device fidelity for `dtype`, and counts the op in the ledger.
void admit_on_slot(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot, bool emulated,
                   c10::ScalarType dtype);

} // namespace hybrid
