#pragma once
// Kernels that create or reshape hybrid storage: they touch no element, so
// they are the same for every backing.

#include <ATen/core/Tensor.h>

#include <optional>

namespace hybrid::native {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_storage_offset_(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                                c10::IntArrayRef size, c10::IntArrayRef stride);
at::Tensor& set_storage_(at::Tensor& self, c10::Storage source);
at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty_(at::Tensor& self);

// Grows or shrinks a hybrid storage to `nbytes` on its own slot, keeping the
// leading bytes (torch.UntypedStorage.resize_ and tensor resizes end here).
void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes);

} // namespace hybrid::native
