#pragma once
#include <ATen/core/Tensor.h>

namespace hybrid::native {
// Copies between host, hybrid slots and (where a slot is cuda-backed) GPUs.
// The bytes really move; the copy is placed on the timeline of both ends.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
} // namespace hybrid::native
