// Sparse COO tensors on a slot, as graph networks move them to CUDA
// (`adj.to("cuda")`, then `torch.spmm(adj, x)`).
//
// A slot's COO tensor is torch's own SparseTensorImpl over two strided tensors
// of the slot (indices and values): its bytes are the slot's, counted by the
// slot's allocator, and moved as any of its tensors. Two kinds of kernel serve
// it at SparsePrivateUse1:
//  - metadata and construction (indices, values, nnz, dims, the coalesced flag,
//    the constructors): torch's device-generic natives, registered here as torch
//    registers them for SparseCPU and SparseCUDA;
//  - every other op (products, conversions, coalescing, sums...): the execution
//    device's own sparse kernel runs on a COO tensor built over aliases of the
//    same indices and values (HybridAlias.h), and its results are mapped back
//    to the slot (AliasSet::to_hybrid, which maps any kernel's COO result, so a
//    dense op's sparse gradient lands too). The op's timeline record, where a
//    COO tensor stands as its indices and values, is flagged sparse: it is
//    priced by the bytes it moves (sparse kernels are memory-bound), not as
//    the dense op of the same name.
// Compressed layouts (CSR, CSC, BSR, BSC) stay refused (HybridSparse.cpp).

#include "aten/HybridAlias.h"
#include "aten/HybridFallback.h"
#include "aten/HybridFidelity.h"
#include "aten/HybridRefusals.h"
#include "model/HybridLedger.h"
#include "model/HybridTimeline.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridGuard.h"
#include "runtime/HybridSlots.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <string>

namespace hybrid {
namespace {

// One op's worth of COO tensors moved onto the execution device and back.
class CooAliases {
 public:
  CooAliases(AliasSet& aliases, c10::Device exec) : aliases_(aliases), exec_(exec) {}

  at::Tensor to_exec(const at::Tensor& t, bool written) {
    if (!t.defined() || !t.is_privateuseone()) return t;
    if (t.layout() != c10::kSparse) return aliases_.alias(t, written);
    auto* impl = at::sparse::get_sparse_impl(t);
    at::Tensor alias = coo_over(t, aliases_.alias(impl->indices(), false), aliases_.alias(impl->values(), false),
                                exec_, impl->coalesced());
    coo_.push_back({t, alias, written});
    return alias;
  }

  at::Tensor to_slot(const at::Tensor& result) {
    for (const Entry& e : coo_) {
      if (e.alias.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) return e.original;
    }
    return aliases_.to_hybrid(result);
  }

  // An in-place op may have swapped the alias's indices and values, resized it or
  // changed its coalesced flag: the slot's tensor takes the same.
  void write_back_all() {
    for (const Entry& e : coo_) {
      if (!e.written) continue;
      auto* src = at::sparse::get_sparse_impl(e.alias);
      auto* dst = at::sparse::get_sparse_impl(e.original);
      at::Tensor indices = aliases_.to_hybrid(src->indices());
      at::Tensor values = aliases_.to_hybrid(src->values());
      dst->raw_resize_(src->sparse_dim(), src->dense_dim(), src->sizes());
      dst->set_indices_and_values_unsafe(indices, values);
      dst->set_coalesced(src->coalesced());
    }
  }

 private:
  struct Entry {
    at::Tensor original;
    at::Tensor alias;
    bool written;
  };
  AliasSet& aliases_;
  c10::Device exec_;
  c10::SmallVector<Entry, 2> coo_;
};

// The slot the op runs on; CUDA's error when a host tensor is among a slot's.
c10::DeviceIndex place_coo(const c10::OperatorHandle& op, const c10::IValue* args, size_t n, c10::ScalarType& dtype) {
  c10::DeviceIndex slot = -1;
  std::optional<c10::Device> host;
  auto note = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    if (!t.is_privateuseone()) {
      if (t.dim() > 0 && !host) host = t.device();
      return;
    }
    const c10::DeviceIndex index = t.device().index();
    TORCH_CHECK(slot < 0 || slot == index, "Expected all tensors to be on the same device, but found at least two "
                "devices, hybrid:", static_cast<int>(slot), " and hybrid:", static_cast<int>(index),
                "! (when checking arguments for ", op.operator_name().name, ")");
    slot = index;
    if (dtype == c10::ScalarType::Undefined) dtype = t.scalar_type();
  };
  for (size_t i = 0; i < n; ++i) {
    if (args[i].isTensor()) {
      note(args[i].toTensor());
    } else if (args[i].isTensorList()) {
      for (const at::Tensor& t : args[i].toTensorList()) note(t);
    }
  }
  TORCH_CHECK(slot >= 0, op.operator_name().name, ": reached the slots' sparse kernels without a slot tensor");
  // copy_ between a slot and the host is a copy, as on CUDA.
  TORCH_CHECK(!host || op.operator_name().name == "aten::copy_", "Expected all tensors to be on the same device, but found at least two devices, hybrid:",
              static_cast<int>(slot), " and ", host->str(), "! (when checking arguments for ",
              op.operator_name().name, ")");
  return slot;
}

void run_coo_impl(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DeviceIndex& slot_out) {
  const auto& arguments = op.schema().arguments();
  const size_t n_args = arguments.size();
  const size_t begin = stack->size() - n_args;
  c10::IValue* args = stack->data() + begin;

  const SlotTablePtr& rack = current_table();
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  const c10::DeviceIndex slot = place_coo(op, args, n_args, dtype);
  slot_out = slot;
  const bool emulated = rack->is_emulated(slot);
  const c10::Device exec = execution_device(*rack, slot);
  const c10::DispatchKey exec_key = emulated ? c10::DispatchKey::SparseCPU : c10::DispatchKey::SparseCUDA;
  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasComputedKernelForDispatchKey(exec_key), op.operator_name().name,
      ": torch has no sparse COO kernel for it on ", emulated ? "the CPU, which runs an emulated slot" : "CUDA",
      " (hybrid:", static_cast<int>(slot), "). Instead: the dense tensor (t.to_dense()), on the slot");
  fidelity::check(op, *rack, slot, dtype);
  ledger::count_fallback(op, *rack, slot, emulated);

  const bool recording = timeline::enabled();
  c10::SmallVector<c10::IValue, 4> recorded_inputs;
  if (recording) recorded_inputs.assign(args, args + n_args);

  AliasSet aliases(rack, slot, op.operator_name().name);
  CooAliases coo(aliases, exec);
  for (size_t i = 0; i < n_args; ++i) {
    c10::IValue& v = args[i];
    if (v.isTensor()) {
      v = coo.to_exec(v.toTensor(), is_write(arguments[i]));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> mapped;
      for (const at::Tensor& t : v.toTensorList()) mapped.push_back(coo.to_exec(t, is_write(arguments[i])));
      v = std::move(mapped);
    } else if (v.isDevice() && v.toDevice().is_privateuseone()) {
      v = exec;
    }
  }
  {
    SlotExecution execution(rack, slot, emulated, exec);
    op.redispatchBoxed(c10::DispatchKeySet(exec_key), stack);
  }
  const size_t n_returns = op.schema().returns().size();
  c10::IValue* rets = stack->data() + begin;
  for (size_t i = 0; i < n_returns; ++i) {
    if (rets[i].isTensor()) {
      rets[i] = coo.to_slot(rets[i].toTensor());
    } else if (rets[i].isTensorList()) {
      c10::List<at::Tensor> mapped;
      for (const at::Tensor& t : rets[i].toTensorList()) mapped.push_back(coo.to_slot(t));
      rets[i] = std::move(mapped);
    }
  }
  coo.write_back_all();
  aliases.write_back_all();

  if (recording) {
    timeline::record_op(op, rack->generation(), slot, recorded_inputs.data(), recorded_inputs.size(), rets,
                        n_returns, dtype, timeline::kSparse);
  }
}

void run_coo(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  refusals::noting_failure(op, [&](c10::DeviceIndex& slot) { run_coo_impl(op, stack, slot); });
}

// The constructors make the impl's first (empty) indices and values on the current device, then check the
// given ones against it: as torch's generated CUDA registrations do, they run under a guard of their device.
c10::Device device_or_current(std::optional<c10::Device> device) {
  return device.has_value() && device->has_index() ? *device
                                                   : c10::Device(c10::DeviceType::PrivateUse1, current_slot());
}

at::Tensor coo_with_dims_and_tensors(int64_t sparse_dim, int64_t dense_dim, c10::SymIntArrayRef size,
                                     const at::Tensor& indices, const at::Tensor& values,
                                     std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                                     std::optional<at::Device> device, std::optional<bool> pin_memory,
                                     std::optional<bool> is_coalesced) {
  c10::DeviceGuard guard(values.is_privateuseone() ? values.device() : device_or_current(device));
  return at::native::new_with_dims_and_tensor_sparse_symint(sparse_dim, dense_dim, size, indices, values, dtype,
                                                            layout, device, pin_memory, is_coalesced);
}

at::Tensor coo_with_dims(int64_t sparse_dim, int64_t dense_dim, at::IntArrayRef size,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<at::Device> device, std::optional<bool> pin_memory) {
  c10::DeviceGuard guard(device_or_current(device));
  return at::native::new_with_dims_sparse(sparse_dim, dense_dim, size, dtype, layout, device, pin_memory);
}

at::Tensor empty_coo(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                     std::optional<at::Device> device, std::optional<bool> pin_memory,
                     std::optional<at::MemoryFormat> memory_format) {
  c10::DeviceGuard guard(device_or_current(device));
  return at::native::empty_sparse_symint(size, dtype, layout, device, pin_memory, memory_format);
}

} // namespace

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_coo>());
}

// Metadata and construction: torch's device-generic kernels, as for SparseCPU and SparseCUDA.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(coo_with_dims_and_tensors));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(coo_with_dims));
  m.impl("empty.memory_format", TORCH_FN(empty_coo));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  // torch's composite copy_ sends a device it does not know to _copy_from, which no sparse kernel implements;
  // the execution device's copy_ runs instead, as for any other op.
  m.impl("copy_", torch::CppFunction::makeFromBoxedFunction<&run_coo>());
}

} // namespace hybrid
