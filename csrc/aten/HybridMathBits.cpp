// Copies of tensors that carry a conjugate or negative bit.
//
// torch resolves those bits for most ops in a fallback that clones the tensor
// first; but a copy that involves a hybrid tensor reaches aten::_copy_from, and
// cloning a hybrid tensor copies through _copy_from again: the fallback would
// recurse until the stack overflows (torch.fft.ifft's lazily conjugated result
// could not even be printed). Our _copy_from needs no help: it runs the
// execution device's copy_ on aliases that keep both bits, and that copy_
// resolves them. So for copies that involve a slot the bits are passed through;
// any other device keeps torch's own fallback.

#include <ATen/native/MathBitsFallback.h>
#include <torch/library.h>

namespace hybrid {
namespace {

struct ConjBit final : at::native::MathOpFallback {
  ConjBit() : MathOpFallback(c10::DispatchKey::Conjugate, "conjugate") {}
  bool is_bit_set(const at::Tensor& t) override { return t.is_conj(); }
};

struct NegBit final : at::native::MathOpFallback {
  NegBit() : MathOpFallback(c10::DispatchKey::Negative, "negation") {}
  bool is_bit_set(const at::Tensor& t) override { return t.is_neg(); }
};

bool involves_slot(const c10::OperatorHandle& op, const torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack->size() - n; i < stack->size(); ++i) {
    const c10::IValue& v = (*stack)[i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().is_privateuseone()) return true;
  }
  return false;
}

template <c10::DispatchKey Key, typename Bit>
void copy_with_bit(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                   torch::jit::Stack* stack) {
  if (involves_slot(op, stack)) {
    op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, Key), stack);
    return;
  }
  static Bit bit;
  bit.fallback_impl(op, keys, stack);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  constexpr auto k = c10::DispatchKey::Conjugate;
  m.impl("_copy_from", torch::CppFunction::makeFromBoxedFunction<&copy_with_bit<k, ConjBit>>());
  m.impl("_copy_from_and_resize",
         torch::CppFunction::makeFromBoxedFunction<&copy_with_bit<k, ConjBit>>());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  constexpr auto k = c10::DispatchKey::Negative;
  m.impl("_copy_from", torch::CppFunction::makeFromBoxedFunction<&copy_with_bit<k, NegBit>>());
  m.impl("_copy_from_and_resize",
         torch::CppFunction::makeFromBoxedFunction<&copy_with_bit<k, NegBit>>());
}

} // namespace hybrid
