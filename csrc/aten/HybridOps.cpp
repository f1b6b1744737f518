// Registration only: which ATen ops have dedicated hybrid kernels (each counted
// in the op ledger). Everything else reaches the zero-copy fallback (HybridFallback.cpp).

#include "aten/HybridFallback.h"
#include "aten/native/Copy.h"
#include "aten/native/Memory.h"
#include "model/HybridLedger.h"

#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

namespace hybrid {
namespace {

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  // Hybrid and CPU storages are interchangeable for `param.data = ...`, which
  // is what keeps tied weights tied through Module.to("hybrid").
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.is_cpu() || t.is_privateuseone() || t.is_cuda());
  };
  return dense(self) && dense(from);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Tensor.record_stream: CUDA's caching allocator must not hand a block to
// another stream before the work recorded on it is done. Every op of a slot is
// issued in order (emulated streams run in order on the host; a backed slot's
// kernels go to its GPU's current stream) and the slot allocator returns a block
// only when its tensor dies, so there is nothing to record.
void record_stream(at::Tensor& self, c10::Stream stream) {}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", record_stream);
  m.impl("empty.memory_format", ledger::counted<native::empty_memory_format>("aten::empty.memory_format"));
  m.impl("empty_strided", ledger::counted<native::empty_strided>("aten::empty_strided"));
  m.impl("resize_", ledger::counted<native::resize_>("aten::resize_"));
  m.impl("set_.source_Storage_storage_offset", ledger::counted<native::set_storage_offset_>("aten::set_.source_Storage_storage_offset"));
  m.impl("set_.source_Storage", ledger::counted<native::set_storage_>("aten::set_.source_Storage"));
  m.impl("set_.source_Tensor", ledger::counted<native::set_tensor_>("aten::set_.source_Tensor"));
  m.impl("set_", ledger::counted<native::set_empty_>("aten::set_"));
  m.impl("_copy_from", ledger::counted<native::copy_from>("aten::_copy_from"));
  m.impl("_copy_from_and_resize", ledger::counted<native::copy_from_and_resize>("aten::_copy_from_and_resize"));
  m.impl("view", ledger::counted<view>("aten::view"));
  m.impl("as_strided", ledger::counted<as_strided>("aten::as_strided"));
  m.impl("_reshape_alias", ledger::counted<reshape_alias>("aten::_reshape_alias"));
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

// Composite-only ops (no CPU kernel, so HybridCpuParity.cpp leaves them) that
// must reach the execution device whole, not as the ops they decompose into.
// Routed to the fallback, they run the execution device's composite kernel on
// aliases, exactly as a CPU (or CUDA) tensor would.
//  - mode.values refuses any device type but CPU, CUDA and XPU.
//  - addr_ passes one Tensor object as both input and output of addr.out,
//    which tells in-place from out= by the objects' addresses (self must not
//    be resized to the outer product's shape); through a boxed call the two
//    are distinct objects.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  const auto whole = [] { return torch::CppFunction::makeFromBoxedFunction<&run_on_slot>(); };
  m.impl("mode.values", whole());
  m.impl("addr_", whole());
}

} // namespace hybrid
