#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace hybrid {
// Runs `op` on the slot its hybrid arguments live on (see HybridFallback.cpp).
void run_on_slot(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Whether the op writes through this argument (its schema marks it `Tensor(a!)`).
inline bool is_write(const c10::Argument& arg) {
  const c10::AliasInfo* info = arg.alias_info();
  return info != nullptr && info->isWrite();
}
} // namespace hybrid
