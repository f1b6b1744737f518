// Sparse layouts on a slot. A slot holds strided tensors only: its memory is
// the modelled HBM its allocator counts, and its kernels are the execution
// device's strided ones. An op that would make or take a sparse COO or
// compressed (CSR, CSC, BSR, BSC) tensor on a slot reaches the sparse
// dispatch keys of PrivateUse1, where this fallback refuses it by name, with
// what to use instead, before anything is allocated or written.


#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <string>

namespace hybrid {
namespace {

std::string slot_named(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    c10::Device device(c10::kCPU);
    if (v.isTensor() && v.toTensor().defined()) {
      device = v.toTensor().device();
    } else if (v.isDevice()) {
      device = v.toDevice();
    } else {
      continue;
    }
    if (device.is_privateuseone()) return device.has_index() ? "hybrid:" + std::to_string(device.index()) : "a slot";
  }
  return "a slot";
}

void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, op.operator_name().name, ": a sparse tensor cannot be on ", slot_named(op, *stack),
      ": slots hold strided tensors only. Instead: a dense tensor on the slot (adj.to_dense().to(device), then "
      "adj @ x, the same product), or the sparse tensor kept on the CPU (torch.sparse.mm(adj, x.cpu()).to(device))");
}

} // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

} // namespace hybrid
