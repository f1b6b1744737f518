// Convolutions. ATen's _convolution picks a backend by device type and sends
// devices it does not know to convolution_overrideable (and its backward). An
// emulated slot answers with the CPU's own convolution on the same bytes, so
// it takes exactly the CPU's algorithm (mkldnn, slow_conv2d, ...).

#include "aten/HybridFallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace hybrid {
namespace {

c10::OperatorHandle op_named(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// convolution_overrideable's schema is convolution's, argument for argument.
void convolution_forward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const c10::OperatorHandle convolution = op_named("aten::convolution");
  run_on_slot(convolution, stack);
}

// convolution_backward_overrideable lacks convolution_backward's bias_sizes
// argument (position 3); the bias gradient is the output-channel count long.
void convolution_backward(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  static const c10::OperatorHandle backward = op_named("aten::convolution_backward");
  constexpr size_t kArgs = 10;  // grad_output, input, weight, stride, ..., output_mask
  const size_t begin = stack->size() - kArgs;
  const at::Tensor& weight = (*stack)[begin + 2].toTensor();
  const bool transposed = (*stack)[begin + 6].toBool();
  const int64_t groups = (*stack)[begin + 8].toInt();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(begin + 3),
                c10::IValue(std::vector<int64_t>{channels}));
  run_on_slot(backward, stack);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&convolution_forward>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolution_backward>());
}

} // namespace hybrid
