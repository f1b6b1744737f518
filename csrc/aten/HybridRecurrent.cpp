// Fused recurrent cells. ATen's LSTM and GRU cells (RNN.cpp) take their fused
// path on every device that is not the CPU, PrivateUse1 included: two matmuls,
// then aten::_thnn_fused_lstm_cell / _thnn_fused_gru_cell, whose backward
// formulas call _thnn_fused_lstm_cell_backward_impl / _thnn_fused_gru_cell_backward.
// torch implements those four for CUDA only. A cuda-backed slot runs CUDA's
// kernels through the fallback; an emulated slot runs the kernels below, one op
// each (hybrid::_thnn_fused_*, same schemas), so each cell is one record on the
// slot's timeline, as the fused CUDA kernel is one launch.
//
// The math is CUDA's (aten/src/ATen/native/cuda/RNN.cu): the workspace holds
// the activated LSTM gates (i, f, g, o), or the GRU's (r, z, n, hn + b_hn, hx),
// which is what the backward kernels read. The results equal the CPU's unfused
// cell to float rounding (the sums are associated differently), not bit for bit.

#include "aten/HybridFallback.h"
#include "runtime/HybridSlots.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

namespace hybrid {
namespace {

at::Tensor maybe(const std::optional<at::Tensor>& t) { return t.has_value() ? *t : at::Tensor(); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_lstm_cell: input_gates and hidden_gates must be matrices of one size, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(input_gates.size(1) == 4 * cx.size(-1), "_thnn_fused_lstm_cell: the gates hold 4 * hidden_size (",
              4 * cx.size(-1), ") columns, got ", input_gates.size(1));
  at::Tensor gates = input_gates + hidden_gates;
  const at::Tensor b_ih = maybe(input_bias), b_hh = maybe(hidden_bias);
  if (b_ih.defined()) gates = gates + b_ih;
  if (b_hh.defined()) gates = gates + b_hh;
  auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(
    const std::optional<at::Tensor>& grad_hy_opt, const std::optional<at::Tensor>& grad_cy_opt,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const at::Tensor grad_hy = maybe(grad_hy_opt), grad_cy = maybe(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) return {at::Tensor(), at::Tensor(), at::Tensor()};
  auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor tanh_cy = cy.tanh();
  at::Tensor d_cy = grad_cy.defined() ? grad_cy : at::zeros_like(cy);
  at::Tensor d_o = at::zeros_like(o);
  if (grad_hy.defined()) {
    d_cy = d_cy + grad_hy * o * (1 - tanh_cy * tanh_cy);
    d_o = grad_hy * tanh_cy * o * (1 - o);
  }
  const at::Tensor d_i = d_cy * g * i * (1 - i);
  const at::Tensor d_f = d_cy * cx * f * (1 - f);
  const at::Tensor d_g = d_cy * i * (1 - g * g);
  at::Tensor grad_gates = at::cat({d_i, d_f, d_g, d_o}, 1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, d_cy * f, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  TORCH_CHECK(input_gates.dim() == 2 && input_gates.sizes() == hidden_gates.sizes(),
              "_thnn_fused_gru_cell: input_gates and hidden_gates must be matrices of one size, got ",
              input_gates.sizes(), " and ", hidden_gates.sizes());
  TORCH_CHECK(input_gates.size(1) == 3 * hx.size(-1), "_thnn_fused_gru_cell: the gates hold 3 * hidden_size (",
              3 * hx.size(-1), ") columns, got ", input_gates.size(1));
  at::Tensor ig = input_gates, hg = hidden_gates;
  const at::Tensor b_ih = maybe(input_bias), b_hh = maybe(hidden_bias);
  if (b_ih.defined()) ig = ig + b_ih;
  if (b_hh.defined()) hg = hg + b_hh;
  auto i = ig.chunk(3, 1);
  auto h = hg.chunk(3, 1);
  const at::Tensor r = (i[0] + h[0]).sigmoid();
  const at::Tensor z = (i[1] + h[1]).sigmoid();
  const at::Tensor n = (i[2] + r * h[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, h[2], hx}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hn = w[3], &hx = w[4];
  const at::Tensor d_z = grad_hy * (hx - n) * z * (1 - z);
  const at::Tensor d_hx = grad_hy * z;
  const at::Tensor d_n = grad_hy * (1 - z) * (1 - n * n);
  const at::Tensor d_hn = d_n * r;
  const at::Tensor d_r = d_n * hn * r * (1 - r);
  at::Tensor grad_input_gates = at::cat({d_r, d_z, d_n}, 1);
  at::Tensor grad_hidden_gates = at::cat({d_r, d_z, d_hn}, 1);
  at::Tensor grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  at::Tensor grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {grad_input_gates, grad_hidden_gates, d_hx, grad_input_bias, grad_hidden_bias};
}

// The aten op on a slot: CUDA's own kernel on a backed slot, ours (the hybrid:: op of
// the same schema) on an emulated one. Either way one record on the slot's timeline.
template <const char* Name>
void on_slot(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const c10::OperatorHandle ours = c10::Dispatcher::singleton().findSchemaOrThrow(Name, "");
  const size_t n = op.schema().arguments().size();
  const c10::IValue* args = stack->data() + stack->size() - n;
  c10::DeviceIndex slot = -1;
  for (size_t i = 0; i < n && slot < 0; ++i) {
    if (args[i].isTensor() && args[i].toTensor().is_privateuseone()) slot = args[i].toTensor().device().index();
  }
  const bool emulated = slot < 0 || current_table()->is_emulated(slot);
  run_on_slot(emulated ? ours : op, stack);
}

constexpr char kLstm[] = "hybrid::_thnn_fused_lstm_cell";
constexpr char kLstmBackward[] = "hybrid::_thnn_fused_lstm_cell_backward_impl";
constexpr char kGru[] = "hybrid::_thnn_fused_gru_cell";
constexpr char kGruBackward[] = "hybrid::_thnn_fused_gru_cell_backward";

} // namespace

TORCH_LIBRARY_FRAGMENT(hybrid, m) {
  m.def("_thnn_fused_lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, "
        "Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)");
  m.def("_thnn_fused_lstm_cell_backward_impl(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, "
        "Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor)");
  m.def("_thnn_fused_gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, "
        "Tensor? hidden_bias=None) -> (Tensor, Tensor)");
  m.def("_thnn_fused_gru_cell_backward(Tensor grad_hy, Tensor workspace, bool has_bias) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(hybrid, CPU, m) {
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", torch::CppFunction::makeFromBoxedFunction<&on_slot<kLstm>>());
  m.impl("_thnn_fused_lstm_cell_backward_impl", torch::CppFunction::makeFromBoxedFunction<&on_slot<kLstmBackward>>());
  m.impl("_thnn_fused_gru_cell", torch::CppFunction::makeFromBoxedFunction<&on_slot<kGru>>());
  m.impl("_thnn_fused_gru_cell_backward", torch::CppFunction::makeFromBoxedFunction<&on_slot<kGruBackward>>());
}

} // namespace hybrid
