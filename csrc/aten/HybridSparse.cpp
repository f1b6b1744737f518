// Compressed sparse layouts on a slot. A slot holds strided tensors and sparse
// COO tensors (HybridSparseCoo.cpp), not compressed ones (CSR, CSC, BSR, BSC):
// an op that would make or take one on a slot reaches SparseCsrPrivateUse1,
// where this fallback refuses it by name, with what to use instead, before
// anything is allocated or written.
//
// One move never reached the fallback: _to_copy dispatches on its target too
// (BackendSelect), so a compressed tensor sent to a slot lands on
// SparseCsrPrivateUse1, where torch's CompositeExplicitAutograd kernel ranks
// above any fallback, copies the indices and values, and builds the result's
// impl directly. So _to_copy has its own kernel there: it refuses a slot as the
// target of a sparse result and otherwise runs torch's composite unchanged. The
// compressed factories (torch.sparse_csr_tensor(..., device=slot) and the
// like) are composites at that key as well, and are refused there by name.


#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_to_copy_native.h>
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

[[noreturn]] void refuse(const std::string& op_name, const std::string& slot) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, op_name, ": a compressed sparse tensor (CSR, CSC, BSR, BSC) cannot be on ", slot,
      ": slots hold strided and sparse COO tensors. Instead: the COO tensor (t.to_sparse_coo().to(device), then "
      "torch.sparse.mm(adj, x)), or a dense tensor on the slot (adj.to_dense().to(device), then adj @ x)");
  TORCH_INTERNAL_ASSERT(false);  // TORCH_CHECK_NOT_IMPLEMENTED(false, ...) always throws
}

void refuse_sparse(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  refuse(op.operator_name().name, slot_named(op, *stack));
}

at::Tensor compressed_to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                              std::optional<at::Layout> layout, std::optional<at::Device> device,
                              std::optional<bool> pin_memory, bool non_blocking,
                              std::optional<at::MemoryFormat> memory_format) {
  const bool stays_sparse = !layout.has_value() || *layout != c10::kStrided;
  if (device.has_value() && device->is_privateuseone() && stays_sparse) {
    refuse("aten::_to_copy", device->has_index() ? "hybrid:" + std::to_string(device->index()) : "a slot");
  }
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

} // namespace

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("_to_copy", TORCH_FN(compressed_to_copy));
  // The factories that build a compressed tensor on their target have composite kernels at this key too.
  for (const char* factory : {"sparse_compressed_tensor.comp_plain_value_size", "sparse_compressed_tensor.comp_plain_value",
                              "_sparse_compressed_tensor_unsafe"}) {
    m.impl(factory, torch::CppFunction::makeFromBoxedFunction<&refuse_sparse>());
  }
}

} // namespace hybrid
