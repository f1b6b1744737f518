// torch's foreach ops (`_foreach_add_`, `_foreach_lerp_`, `_foreach_norm`, ...:
// what optimizers and clip_grad_norm_ run over lists of tensors) are one
// multi-tensor kernel per launch on CUDA (multi_tensor_apply) and a per-tensor
// loop everywhere else: their CompositeExplicitAutograd kernel serves
// PrivateUse1 too, so without a hybrid kernel every tensor's op would reach the
// fallback, and the modelled timeline, on its own (an AdamW step over GPT-2's
// 148 tensors became 148 launches per foreach op).
//
// The hybrid kernel registered here takes the whole op to run_on_slot when
// CUDA's fast route would (every tensor of every list on one slot, in one
// dtype): one timeline record, which devices.cost prices as the multi-tensor
// kernel's launches. What runs is the execution device's own kernel for the
// whole op: on an emulated slot the CPU's, which is the same per-tensor loop on
// the same bytes, so the numbers are the ones the loop gave before, bit for
// bit; on a cuda-backed slot CUDA's multi-tensor kernel. Where CUDA would leave
// the fast route (tensors on several slots, host tensors in a list, mixed
// dtypes), the op takes torch's per-tensor path as before.
//
// Registered at load time over the dispatcher's op table (as HybridCpuParity
// does), not from a hand-kept list that would drift with torch versions.

#include "aten/HybridFallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <memory>
#include <string_view>

namespace hybrid {
namespace {

struct FastRoute {
  c10::DeviceIndex slot = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  bool same_slot(const at::Tensor& t) {
    const c10::DeviceIndex index = t.device().index();
    if (slot < 0) slot = index;
    return index == slot;
  }

  // A tensor of one of the op's lists: on the slot, in the lists' dtype.
  bool listed(const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone() || !same_slot(t)) return false;
    if (dtype == c10::ScalarType::Undefined) dtype = t.scalar_type();
    return t.scalar_type() == dtype;
  }

  // A tensor argument outside the lists (`other`, a scalar tensor): on the
  // slot, or a 0-d host tensor, which CUDA's kernels read as a scalar.
  bool single(const at::Tensor& t) {
    if (!t.defined()) return true;
    if (t.is_privateuseone()) return same_slot(t);
    return t.dim() == 0;
  }
};

bool fast_route(const torch::jit::Stack& stack, size_t n_args) {
  FastRoute route;
  for (size_t i = stack.size() - n_args; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        if (!route.listed(t)) return false;
      }
    } else if (v.isTensor()) {
      if (!route.single(v.toTensor())) return false;
    }
  }
  return route.slot >= 0;
}

void foreach_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (fast_route(*stack, op.schema().arguments().size())) {
    run_on_slot(op, stack);
  } else {
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd, *stack);
  }
}

bool is_out_overload(std::string_view overload) {
  return overload == "out" || (overload.size() > 4 && overload.substr(overload.size() - 4) == "_out");
}

// The functional and in-place foreach ops (CUDA's multi-tensor kernels); the
// out= overloads are composites over them on every backend, CUDA's included.
bool is_multi_tensor_foreach(const c10::OperatorName& name, const c10::OperatorHandle& op) {
  static constexpr std::string_view kPrefix = "aten::_foreach_";
  if (std::string_view(name.name).substr(0, kPrefix.size()) != kPrefix) return false;
  if (is_out_overload(name.overload_name)) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
}

// Two copies CUDA runs as one kernel each and every other backend decomposes
// into a copy per tensor (CompositeExplicitAutograd): FSDP2's all-gather
// copy-out (split_with_sizes_copy) and reduce-scatter copy-in (_chunk_cat).
// Taken whole to the slot like a foreach op: one record, priced as one copy of
// all the bytes, where the decomposition gave one launch per parameter.
bool is_fused_copy(const c10::OperatorName& name, const c10::OperatorHandle& op) {
  if (name.overload_name != "out") return false;
  if (name.name != "aten::split_with_sizes_copy" && name.name != "aten::_chunk_cat") return false;
  return !op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
}

} // namespace

int register_foreach() {
  static int registered = -1;
  if (registered >= 0) return registered;
  // Must outlive every dispatch through it: never freed.
  auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  registered = 0;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    auto op = dispatcher.findOp(name);
    if (!op || !(is_multi_tensor_foreach(name, *op) || is_fused_copy(name, *op))) continue;
    std::string qualified = name.name.substr(sizeof("aten::") - 1);
    if (!name.overload_name.empty()) qualified += "." + name.overload_name;
    lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&foreach_kernel>());
    ++registered;
  }
  return registered;
}

} // namespace hybrid
