// Whole-sequence LSTM layers. On the CPU, aten::lstm runs each layer over the
// whole sequence as one oneDNN kernel (aten::mkldnn_rnn_layer, its backward one
// more); its composite form, which every other device gets, is a loop of
// per-step matmuls and cells. On a slot that loop cost one op, and one record,
// per step and layer, and the slot ran a different kernel from the CPU it
// emulates. Here a slot's aten::lstm takes the CPU's own route: the same layer
// kernel through the fallback (one op and one record per layer and direction,
// as a GPU's cuDNN layer is one call), so its results equal the CPU's bit for
// bit. Where the CPU would not take that route (oneDNN off, a dtype it does not
// run, projections, a packed sequence), neither does the slot: the composite runs.

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/ops/lstm_native.h>
#include <torch/library.h>

namespace hybrid {
namespace {

constexpr int64_t kLstmMode = 2;  // ideep::rnn_kind::LSTM, the mode aten::mkldnn_rnn_layer takes

bool runs_whole_layers(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
                       int64_t num_layers, bool bidirectional) {
  if (!at::globalContext().userEnabledMkldnn()) return false;
  if (input.dim() != 3 || hx.size() != 2 || input.scalar_type() != at::kFloat) return false;
  const int64_t per_layer = (has_biases ? 4 : 2) * (bidirectional ? 2 : 1);
  if (static_cast<int64_t>(params.size()) != per_layer * num_layers) return false;  // projections: one more each
  for (const at::Tensor& t : hx) {
    if (t.scalar_type() != at::kFloat) return false;
  }
  for (const at::Tensor& p : params) {
    if (p.scalar_type() != at::kFloat) return false;
  }
  return true;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input, at::TensorList hx,
                                                    at::TensorList params, bool has_biases, int64_t num_layers,
                                                    double dropout_p, bool train, bool bidirectional,
                                                    bool batch_first) {
  if (!runs_whole_layers(input, hx, params, has_biases, num_layers, bidirectional)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout_p, train, bidirectional, batch_first);
  }
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t stride = has_biases ? 4 : 2;
  const at::Tensor h0 = hx[0].contiguous(), c0 = hx[1].contiguous();
  const int64_t hidden_size = h0.size(2);
  at::Tensor layer_input = (batch_first ? input.transpose(0, 1) : input).contiguous();
  std::vector<at::Tensor> hy, cy, outputs(directions);
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const at::Tensor& w_ih = params[index * stride];
      const at::Tensor& w_hh = params[index * stride + 1];
      // The oneDNN layer always takes biases: zeros where the module has none, as the CPU's driver passes.
      const at::Tensor b_ih = has_biases ? params[index * stride + 2] : at::zeros(w_ih.sizes(), w_ih.options());
      const at::Tensor b_hh = has_biases ? params[index * stride + 3] : at::zeros(w_hh.sizes(), w_hh.options());
      auto result = at::mkldnn_rnn_layer(layer_input, w_ih, w_hh, b_ih, b_hh, h0[index], c0[index],
                                         /*reverse=*/direction > 0, /*batch_sizes=*/{}, kLstmMode, hidden_size,
                                         num_layers, has_biases, bidirectional, /*batch_first=*/false, train);
      outputs[direction] = std::get<0>(result);
      hy.push_back(std::get<1>(result));
      cy.push_back(std::get<2>(result));
    }
    layer_input = directions == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout_p != 0 && train && layer < num_layers - 1) layer_input = at::dropout(layer_input, dropout_p, true);
  }
  at::Tensor output = batch_first ? layer_input.transpose(0, 1) : layer_input;
  return {output, at::stack(hy, 0), at::stack(cy, 0)};
}

} // namespace

// Above autograd, as the composite it replaces: the layer ops below it carry their own derivatives.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", lstm);
}

} // namespace hybrid
