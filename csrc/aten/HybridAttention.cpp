// scaled_dot_product_attention picks its kernel through a per-device stub. An
// emulated slot must choose exactly what the CPU chooses (the flash kernel for
// CPU), or its numbers would come from the unfused math path and differ from
// the CPU's in the last bits. A cuda-backed slot asks CUDA's choice.

#include "runtime/HybridSlots.h"

#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice.h>

namespace hybrid {
namespace {

int64_t choose_sdp_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                           const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                           std::optional<double> scale, bool enable_gqa) {
  const c10::DeviceIndex slot = query.device().index();
  const c10::DeviceType exec = is_emulated(slot) ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
  if (exec == c10::DeviceType::CUDA) {
    // The fused CUDA kernels would be reached with hybrid tensors through the
    // composite's CUDA-only branches; the math path runs the same on any device.
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  // The op (not the stub) reaches the CPU's choice through the fallback.
  return at::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
}

} // namespace
} // namespace hybrid

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &hybrid::choose_sdp_backend)
} // namespace at::native
