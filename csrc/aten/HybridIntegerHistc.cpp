// Dtypes CUDA's kernel takes and the CPU's refuses. torch.histc counts integer
// tensors on CUDA (SummaryOps.cu) but its CPU kernel raises "histogram_cpu not
// implemented for 'Int'", and CUDA code relies on it: transformers' grouped
// mixture-of-experts counts tokens per expert with histc on int32 ids whenever
// the device is not the CPU. An emulated slot runs the op below for integer
// inputs (floating inputs keep the CPU's kernel): CUDA's rule in exact integer
// arithmetic, bin = (x - min) * bins / (max - min), the top edge in the last
// bin, values outside [min, max] ignored, min == max meaning the data's range.
// One record on the slot's timeline, as CUDA's kernel is one launch.

#include "aten/HybridFallback.h"
#include "runtime/HybridSlots.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace hybrid {
namespace {

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  if (!at::isIntegralType(self.scalar_type(), /*includeBool=*/false)) return at::histc(self, bins, min, max);
  TORCH_CHECK(bins > 0, "torch.histc: bins must be > 0, but got ", bins);
  int64_t lo = min.toLong(), hi = max.toLong();
  const at::Tensor x = self.reshape(-1).to(at::kLong);
  if (lo == hi && x.numel() > 0) {
    lo = x.min().item<int64_t>();
    hi = x.max().item<int64_t>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min, got min ", lo, " and max ", hi);
  const at::Tensor inside = x.masked_select((x >= lo) & (x <= hi));
  const at::Tensor bin = ((inside - lo) * bins).div(hi - lo, "floor").clamp_max(bins - 1);
  return at::bincount(bin, {}, bins).to(self.scalar_type());
}

// CUDA's kernel on a backed slot, ours on an emulated one.
void histc_on_slot(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const c10::OperatorHandle ours = c10::Dispatcher::singleton().findSchemaOrThrow("hybrid::histc", "");
  const size_t n = op.schema().arguments().size();
  const c10::IValue& self = (*stack)[stack->size() - n];
  const bool emulated = !self.isTensor() || current_table()->is_emulated(self.toTensor().device().index());
  run_on_slot(emulated ? ours : op, stack);
}

} // namespace

TORCH_LIBRARY_FRAGMENT(hybrid, m) {
  m.def("histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor");
}

TORCH_LIBRARY_IMPL(hybrid, CPU, m) { m.impl("histc", histc); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", torch::CppFunction::makeFromBoxedFunction<&histc_on_slot>());
}

} // namespace hybrid
