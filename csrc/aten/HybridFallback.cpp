// The boxed fallback every ATen op without a dedicated hybrid kernel reaches.
// It runs the execution device's own kernel (CPU for an emulated slot, CUDA for
// a backed one) on aliases of the same bytes: no copy in, no copy out. Outputs
// are drawn from the slot's allocator (see RouteCpuAllocations) and relabelled
// as the slot's; a compact record of the op goes to the modelled timeline.

#include "aten/HybridAlias.h"
#include "aten/HybridFallback.h"
#include "aten/HybridFidelity.h"
#include "aten/HybridPlacement.h"
#include "aten/HybridRefusals.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridGenerator.h"
#include "runtime/HybridGuard.h"
#include "model/HybridLedger.h"
#include "runtime/HybridSlots.h"
#include "model/HybridTimeline.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <optional>
#include <string_view>

namespace hybrid {
namespace {

std::string device_name(const c10::Device& d) {
  return d.is_privateuseone() ? "hybrid:" + std::to_string(static_cast<int>(d.index()))
                              : d.str();
}

// Ops whose CUDA kernels accept host tensors beside device ones (index tensors,
// packed-sequence lengths), so ours do too.
bool accepts_host_tensors(const c10::OperatorHandle& op) {
  static constexpr std::string_view kAllowed[] = {
      "aten::index",        "aten::index_put_",      "aten::_index_put_impl_",
      "aten::index_put",    "aten::_pack_padded_sequence", "aten::_pad_packed_sequence",
      "aten::lstm",         "aten::gru",             "aten::rnn_tanh",
      "aten::rnn_relu",     "aten::_unsafe_index",   "aten::_unsafe_index_put",
  };
  const std::string& name = op.operator_name().name;
  for (std::string_view allowed : kAllowed) {
    if (name == allowed) return true;
  }
  return false;
}

Placement place(const c10::OperatorHandle& op, const c10::IValue* args, size_t n, const SlotTable& rack) {
  Placement p{rack};
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      p.note_tensor(op, v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) p.note_tensor(op, t);
    } else if (v.isOptionalTensorList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) p.note_tensor(op, e.toTensor());
      }
    } else if (v.isDevice()) {
      const c10::Device d = v.toDevice();
      if (d.is_privateuseone()) p.note_device(op, d.has_index() ? d.index() : current_slot());
    }
  }
  if (p.slot >= 0 && p.host_tensor) p.check_host_tensor(op, accepts_host_tensors(op));
  return p;
}

bool is_generator_slot(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.real_type();
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  if (type->kind() != c10::TypeKind::OptionalType) return false;
  return type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
      c10::TypeKind::GeneratorType;
}

} // namespace

void Placement::raise_two_slots(const c10::OperatorHandle& op, c10::DeviceIndex index) const {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, hybrid:", static_cast<int>(slot), " and hybrid:",
              static_cast<int>(index), "! (when checking arguments for ",
              op.operator_name().name, ")");
}

void Placement::raise_host_tensor(const c10::OperatorHandle& op) const {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, hybrid:", static_cast<int>(slot), " and ",
              device_name(*host_tensor), "! (when checking arguments for ",
              op.operator_name().name, ")");
}

void admit_on_slot(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot, bool emulated,
                   c10::ScalarType dtype) {
  if (emulated && C10_UNLIKELY(!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU))) {
    refusals::refuse_cuda_only(op, rack, slot);  // a CUDA-only op: named, with what to use instead
  }
  // After the rack check (Placement): a retired rack's tensor is refused, never counted.
  fidelity::check(op, rack, slot, dtype);
  ledger::count_fallback(op, rack, slot, emulated);
}

namespace {

void run_on_slot_impl(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex& slot_out) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t n_args = arguments.size();
  TORCH_INTERNAL_ASSERT(stack->size() >= n_args);
  const size_t begin = stack->size() - n_args;
  c10::IValue* args = stack->data() + begin;

  // Taken once: the table stays valid for the whole op (see current_table).
  const SlotTablePtr& rack = current_table();
  const Placement placement = place(op, args, n_args, *rack);
  if (placement.slot < 0) {
    // No hybrid tensor or device among the arguments (a hybrid generator
    // alone brought the op here): run it where its tensors are, which lets the
    // kernel itself reject the generator as CUDA's would.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    return;
  }
  const c10::DeviceIndex slot = placement.slot;
  slot_out = slot;
  const bool emulated = rack->is_emulated(slot);
  const c10::Device exec = execution_device(*rack, slot);
  admit_on_slot(op, *rack, slot, emulated, placement.dtype);

  const bool recording = timeline::enabled();
  c10::SmallVector<c10::IValue, 8> inputs_for_record;
  if (recording) inputs_for_record.assign(args, args + n_args);

  AliasSet aliases(rack, slot, op.operator_name().name);
  uint8_t flags = 0;

  for (size_t i = 0; i < n_args; ++i) {
    c10::IValue& v = args[i];
    const c10::Argument& arg = arguments[i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined() || !t.is_privateuseone()) continue;
      v = aliases.alias(t, is_write(arg));
    } else if (v.isTensorList()) {
      const bool write = is_write(arg);
      c10::List<at::Tensor> list = v.toTensorList();
      c10::List<at::Tensor> replaced;
      replaced.reserve(list.size());
      for (const at::Tensor& t : list) {
        replaced.push_back(t.defined() && t.is_privateuseone() ? aliases.alias(t, write) : t);
      }
      v = std::move(replaced);
    } else if (v.isOptionalTensorList()) {
      auto list = v.toOptionalTensorList();
      c10::List<std::optional<at::Tensor>> replaced;
      replaced.reserve(list.size());
      for (const std::optional<at::Tensor>& t : list) {
        if (t.has_value() && t->defined() && t->is_privateuseone()) {
          replaced.push_back(aliases.alias(*t, false));
        } else {
          replaced.push_back(t);
        }
      }
      v = std::move(replaced);
    } else if (v.isDevice()) {
      if (v.toDevice().is_privateuseone()) v = exec;
    } else if (v.isGenerator() || (v.isNone() && is_generator_slot(arg))) {
      if (emulated) {
        std::optional<at::Generator> gen;
        if (v.isGenerator()) gen = v.toGenerator();
        v = cpu_generator_for(gen, slot);
      } else if (v.isGenerator() && v.toGenerator().device().is_privateuseone()) {
        v = c10::IValue();  // the CUDA device's default generator
      }
    } else if (v.isBool() && v.toBool() && arg.name() == "is_causal") {
      flags |= timeline::kCausal;
    }
  }

  std::unique_ptr<timeline::Measurement> measured;
  {
    SlotExecution execution(rack, slot, emulated, exec);
    if (!emulated && recording) {
      // On a real GPU the timeline keeps the op's measured time too.
      measured = std::make_unique<timeline::Measurement>();
      measured->start.record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(exec));
    }
    op.redispatchBoxed(c10::DispatchKeySet(execution_key(*rack, slot)), stack);
    if (measured) {
      measured->end.record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(exec));
    }
  }

  const size_t n_returns = schema.returns().size();
  TORCH_INTERNAL_ASSERT(stack->size() == begin + n_returns);
  c10::IValue* rets = stack->data() + begin;
  for (size_t i = 0; i < n_returns; ++i) {
    c10::IValue& r = rets[i];
    if (r.isTensor()) {
      r = aliases.to_hybrid(r.toTensor());
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> list = r.toTensorList();
      c10::List<at::Tensor> mapped;
      mapped.reserve(list.size());
      for (const at::Tensor& t : list) mapped.push_back(aliases.to_hybrid(t));
      r = std::move(mapped);
    }
  }
  aliases.write_back_all();

  if (recording) {
    c10::ScalarType dtype = placement.dtype;
    for (size_t i = 0; i < n_returns && dtype == c10::ScalarType::Undefined; ++i) {
      // Factory ops (no tensor input) are costed in their output's dtype.
      if (rets[i].isTensor() && rets[i].toTensor().defined()) dtype = rets[i].toTensor().scalar_type();
    }
    timeline::record_op(op, rack->generation(), slot, inputs_for_record.data(), inputs_for_record.size(), rets,
                        n_returns, dtype, flags, std::move(measured));
  }
}

} // namespace

void run_on_slot(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  refusals::noting_failure(op, [&](c10::DeviceIndex& slot) { run_on_slot_impl(op, stack, slot); });
}

namespace {
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_on_slot(op, stack); }
} // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

} // namespace hybrid
