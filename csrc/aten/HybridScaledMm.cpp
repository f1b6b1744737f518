// torch._scaled_mm (and its v2, torch.nn.functional.scaled_mm) on a slot, under CUDA's contract.
//
// The CPU kernel an emulated slot runs accepts more than CUDA does (a row-major
// mat2, sizes that are not multiples of 16, e5m2 x e5m2) and fewer scalings (no
// MX or NVFP4 block scales). A slot stands for a chip that runs CUDA code, so a
// call is first held to CUDA's checks (aten/src/ATen/native/cuda/Blas.cpp,
// torch 2.13: same conditions, same messages); then per-tensor and row-wise
// scales run the execution device's own kernel through the fallback, and block
// scales on an emulated slot run `hybrid::_scaled_mm` / `hybrid::_scaled_mm_v2`
// (same schemas), whose CPU kernels (interop/numerics/scaled_mm.py) dequantize
// the blocks and multiply in float32. Either way the op is one record on the
// slot's timeline. A cuda-backed slot runs CUDA's own kernel for everything.

#include "aten/HybridAlias.h"
#include "aten/HybridFallback.h"
#include "runtime/HybridSlots.h"

#include <ATen/BlasBackend.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace hybrid {
namespace {

using at::blas::ScalingType;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

bool is_fp8(c10::ScalarType t) {
  return t == c10::kFloat8_e4m3fn || t == c10::kFloat8_e5m2 || t == c10::kFloat8_e4m3fnuz ||
         t == c10::kFloat8_e5m2fnuz;
}

bool is_fp4(c10::ScalarType t) { return t == c10::ScalarType::Float4_e2m1fn_x2; }

// CUDA's swizzled block-scale sizes: rows padded to 128, scale columns to 4.
int64_t swizzled_numel(int64_t rows, int64_t k, int64_t block) {
  return round_up(rows, 128) * round_up(ceil_div(k, block), 4);
}

// MX: fp8 data, e8m0 scales per 32; NVFP4: packed fp4 data, e4m3 scales per 16.
// `t` is (rows, K) as stored (K halved for packed fp4).
bool is_block_scaled(const at::Tensor& t, const at::Tensor& scale) {
  if (scale.scalar_type() == c10::kFloat8_e8m0fnu && is_fp8(t.scalar_type())) {
    return scale.numel() == swizzled_numel(t.size(0), t.size(1), 32) && scale.is_contiguous();
  }
  if (scale.scalar_type() == c10::kFloat8_e4m3fn && is_fp4(t.scalar_type())) {
    return scale.numel() == swizzled_numel(t.size(0), t.size(1) * 2, 16) && scale.is_contiguous();
  }
  return false;
}

void check_cuda_contract(const at::Tensor& mat1, const at::Tensor& mat2, const std::optional<at::Tensor>& bias,
                         c10::ScalarType out_dtype, bool use_fast_accum) {
  TORCH_CHECK(mat1.dim() == 2, "mat1 must be a matrix");
  TORCH_CHECK(mat2.dim() == 2, "mat2 must be a matrix");
  TORCH_CHECK(mat1.sizes()[1] == mat2.sizes()[0], "mat1 and mat2 shapes cannot be multiplied (", mat1.sizes()[0],
              "x", mat1.sizes()[1], " and ", mat2.sizes()[0], "x", mat2.sizes()[1], ")");
  TORCH_CHECK(!bias || bias->numel() == mat2.sizes()[1], "Bias must be size ", mat2.sizes()[1], " but got ",
              bias->numel());
  TORCH_CHECK(mat1.sizes()[1] % 16 == 0, "Expected trailing dimension of mat1 to be divisible by 16 ",
              "but got mat1 shape: (", mat1.sizes()[0], "x", mat1.sizes()[1], ").");
  TORCH_CHECK(mat2.sizes()[0] % 16 == 0 && mat2.sizes()[1] % 16 == 0, "mat2 shape (", mat2.sizes()[0], "x",
              mat2.sizes()[1], ") must be divisible by 16");
  TORCH_CHECK(is_fp8(mat1.scalar_type()) || is_fp4(mat1.scalar_type()),
              "Expected mat1 to be Float8 or Float4_x2 matrix got ", mat1.scalar_type());
  TORCH_CHECK(is_fp8(mat2.scalar_type()) || is_fp4(mat2.scalar_type()),
              "Expected mat2 to be Float8 or Float4_x2 matrix got ", mat2.scalar_type());
  TORCH_CHECK_VALUE(mat1.scalar_type() != c10::kFloat8_e5m2 || mat2.scalar_type() != c10::kFloat8_e5m2,
                    "Multiplication of two Float8_e5m2 matrices is not supported");
  if (use_fast_accum) {
    TORCH_CHECK(!is_fp4(mat1.scalar_type()) && !is_fp4(mat2.scalar_type()),
                "`use_fast_accum` is not supported when `mat1` or `mat2` tensors have the `Float4_e2m1fn_x2` dtype.");
  }
  if (bias) {
    TORCH_CHECK(out_dtype != c10::kFloat, "Bias is not supported when out_dtype is set to Float32");
    TORCH_CHECK(bias->scalar_type() == c10::kBFloat16 || bias->scalar_type() == c10::kHalf,
                "Bias must be BFloat16 or Half, but got ", bias->scalar_type());
    TORCH_CHECK((out_dtype != c10::kFloat && out_dtype != c10::kBFloat16) || bias->scalar_type() == c10::kBFloat16,
                "Bias must be BFloat16 to compute ", out_dtype, " output, but got ", bias->scalar_type());
    TORCH_CHECK(out_dtype != c10::kHalf || bias->scalar_type() == c10::kHalf, "Bias must be Float16 to compute ",
                out_dtype, " output, but got ", bias->scalar_type());
  }
  // cuBLASLt multiplies a row-major mat1 by a column-major mat2 (size-1 dims have no layout).
  const bool a_row_major = mat1.stride(1) == 1 || mat1.size(1) <= 1;
  const bool b_col_major = mat2.stride(0) == 1 || mat2.size(0) <= 1;
  TORCH_CHECK(a_row_major && b_col_major,
              "Only multiplication of row-major and column-major matrices is supported by cuBLASLt");
}

c10::OperatorHandle blockwise_op(const char* name) {
  auto handle = c10::Dispatcher::singleton().findSchema({name, ""});
  TORCH_CHECK(handle.has_value(), name, " is not registered: import interop (interop.numerics registers it)");
  return *handle;
}

c10::DeviceIndex slot_of(const at::Tensor& t) { return t.is_privateuseone() ? t.device().index() : -1; }

// aten::_scaled_mm(self, mat2, scale_a, scale_b, bias?, scale_result?, out_dtype?, use_fast_accum)
void scaled_mm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const c10::IValue* args = stack->data() + stack->size() - n;
  const at::Tensor& mat1 = args[0].toTensor();
  const at::Tensor& mat2 = args[1].toTensor();
  const at::Tensor& scale_a = args[2].toTensor();
  const at::Tensor& scale_b = args[3].toTensor();
  const auto bias = args[4].toOptional<at::Tensor>();
  const auto out_dtype = args[6].toOptional<c10::ScalarType>().value_or(mat1.scalar_type());
  check_cuda_contract(mat1, mat2, bias, out_dtype, args[7].toBool());
  const c10::DeviceIndex slot = slot_of(mat1);
  if (slot >= 0) check_rack(mat1, *current_table(), "aten::_scaled_mm");  // before the slot is looked up
  if (slot >= 0 && is_emulated(slot) && is_block_scaled(mat1, scale_a) && is_block_scaled(mat2.t(), scale_b)) {
    run_on_slot(blockwise_op("hybrid::_scaled_mm"), stack);
    return;
  }
  run_on_slot(op, stack);
}

bool block_recipe(const c10::IValue& recipes) {
  for (int64_t r : recipes.toIntVector()) {
    if (r == static_cast<int64_t>(ScalingType::BlockWise1x32) || r == static_cast<int64_t>(ScalingType::BlockWise1x16)) {
      return true;
    }
  }
  return false;
}

// aten::_scaled_mm_v2(self, mat2, scale_a[], recipe_a[], swizzle_a[], scale_b[], recipe_b[], swizzle_b[],
//                     bias?, out_dtype?, contraction_dim[], use_fast_accum)
void scaled_mm_v2(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const c10::IValue* args = stack->data() + stack->size() - n;
  const at::Tensor& mat1 = args[0].toTensor();
  const at::Tensor& mat2 = args[1].toTensor();
  const auto bias = args[8].toOptional<at::Tensor>();
  const auto out_dtype = args[9].toOptional<c10::ScalarType>().value_or(c10::kBFloat16);
  if (args[10].toIntVector().empty()) {  // the default (K, K) contraction is the only one cuBLASLt takes
    check_cuda_contract(mat1, mat2, bias, out_dtype, args[11].toBool());
  }
  const c10::DeviceIndex slot = slot_of(mat1);
  if (slot >= 0) check_rack(mat1, *current_table(), "aten::_scaled_mm_v2");  // before the slot is looked up
  if (slot >= 0 && is_emulated(slot) && block_recipe(args[3]) && block_recipe(args[6])) {
    run_on_slot(blockwise_op("hybrid::_scaled_mm_v2"), stack);
    return;
  }
  run_on_slot(op, stack);
}

} // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_mm", torch::CppFunction::makeFromBoxedFunction<&scaled_mm>());
  m.impl("_scaled_mm_v2", torch::CppFunction::makeFromBoxedFunction<&scaled_mm_v2>());
}

} // namespace hybrid
