// scaled_dot_product_attention picks its kernel through a per-device stub. An
// emulated slot must choose exactly what the CPU chooses (the flash kernel for
// CPU), or its numbers would come from the unfused math path and differ from
// the CPU's in the last bits. A cuda-backed slot asks CUDA's choice.
//
// The CPU's chooser also reads requires_grad: it does not pick the fused
// kernel when the mask requires grad, since that kernel cannot differentiate
// with respect to it. The fallback's plain aliases carry no autograd state, so
// the op gets its own kernel that gives the chooser aliases which do.

#include "aten/HybridAlias.h"
#include "runtime/HybridSlots.h"

#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <torch/library.h>

namespace hybrid {
namespace {

int64_t choose_sdp_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                           const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                           std::optional<double> scale, bool enable_gqa) {
  const c10::DeviceIndex slot = query.device().index();
  const SlotTablePtr& rack = current_table();
  check_rack(query, *rack, "scaled_dot_product_attention");
  const c10::DeviceType exec = rack->is_emulated(slot) ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
  if (exec == c10::DeviceType::CUDA) {
    // The fused CUDA kernels would be reached with hybrid tensors through the
    // composite's CUDA-only branches; the math path runs the same on any device.
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  // The op (not the stub) reaches the CPU's choice through the fallback.
  return at::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

// aten::_fused_sdp_choice on a slot: the execution device's chooser, on
// aliases that keep requires_grad.
int64_t execution_device_choice(const at::Tensor& query, const at::Tensor& key,
                                const at::Tensor& value, const std::optional<at::Tensor>& attn_mask,
                                double dropout_p, bool is_causal, std::optional<double> scale,
                                bool enable_gqa) {
  const c10::DeviceIndex slot = query.device().index();
  const SlotTablePtr& rack = current_table();
  check_rack(query, *rack, "aten::_fused_sdp_choice");
  AliasSet aliases(rack, slot, "aten::_fused_sdp_choice");
  auto alias = [&aliases](const at::Tensor& t) {
    if (!t.defined() || !t.is_privateuseone()) return t;
    at::Tensor a = aliases.alias(t, /*written=*/false);
    if (t.requires_grad()) a.set_requires_grad(true);
    return a;
  };
  std::optional<at::Tensor> mask;
  if (attn_mask.has_value()) mask = alias(*attn_mask);
  return at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(execution_key(*rack, slot)), alias(query), alias(key), alias(value), mask,
      dropout_p, is_causal, scale, enable_gqa);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", execution_device_choice);
}

} // namespace hybrid

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &hybrid::choose_sdp_backend)
} // namespace at::native
