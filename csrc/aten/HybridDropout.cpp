// Dropout on a slot draws from the slot's generator, as CUDA's draws from its
// device's. at::dropout sends every tensor that is not the CPU's (PrivateUse1
// included) to aten::native_dropout, whose CPU kernel takes no generator and
// would draw from the process's CPU generator: torch.hybrid.manual_seed (and,
// under the CUDA layer, torch.cuda.manual_seed) would not fix the masks, slot
// dropout would move the CPU's stream, and threads driving several slots would
// race on one generator. An emulated slot runs hybrid::native_dropout instead:
// the CPU kernel's arithmetic with a Generator argument, which the fallback
// fills with the slot's (HybridFallback.cpp). Seeded alike, a slot's masks and
// outputs equal the CPU's dropout bit for bit. The other dropouts (inplace,
// feature, alpha) are composites whose bernoulli_ already reaches the fallback
// with its generator argument. A cuda-backed slot runs CUDA's own kernel, on
// its device's generator.

#include "aten/HybridFallback.h"
#include "runtime/HybridSlots.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

namespace hybrid {
namespace {

// The CPU's native_dropout (same results, same draws), on a given generator.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train,
                                                  std::optional<at::Generator> generator) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;  // p == 1: every element dropped, none divided by 0
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(keep, std::move(generator));
  return {input.mul(mask).mul_(scale), mask};
}

// aten::native_dropout on a slot: ours (with the slot's generator) on an
// emulated slot, CUDA's on a backed one; one record on the slot's timeline.
void native_dropout_on_slot(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const c10::OperatorHandle ours =
      c10::Dispatcher::singleton().findSchemaOrThrow("hybrid::native_dropout", "");
  const at::Tensor& input = (*stack)[stack->size() - op.schema().arguments().size()].toTensor();
  const SlotTablePtr& rack = current_table();
  const c10::DeviceIndex slot = input.is_privateuseone() ? input.device().index() : -1;
  // A slot the current rack lacks (a retired rack's tensor): the fallback refuses it by name.
  if (slot < 0 || slot >= rack->size() || !rack->is_emulated(slot)) {
    run_on_slot(op, stack);
    return;
  }
  stack->emplace_back();  // generator=None: the fallback hands the kernel the slot's
  run_on_slot(ours, stack);
}

std::tuple<at::Tensor&, at::Tensor&> native_dropout_out(const at::Tensor& input, double p,
                                                        std::optional<bool> train, at::Tensor& out0,
                                                        at::Tensor& out1) {
  auto [output, mask] = at::native_dropout(input, p, train);
  at::native::resize_output(out0, output.sizes());
  at::native::resize_output(out1, mask.sizes());
  out0.copy_(output);
  out1.copy_(mask);
  return {out0, out1};
}

} // namespace

TORCH_LIBRARY_FRAGMENT(hybrid, m) {
  m.def("native_dropout(Tensor input, float p, bool? train, Generator? generator=None) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(hybrid, CPU, m) { m.impl("native_dropout", native_dropout); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_dropout", torch::CppFunction::makeFromBoxedFunction<&native_dropout_on_slot>());
  m.impl("native_dropout.out", native_dropout_out);
}

} // namespace hybrid
