#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace hybrid {
// Runs `op` on the slot its hybrid arguments live on (see HybridFallback.cpp).
void run_on_slot(const c10::OperatorHandle& op, torch::jit::Stack* stack);
} // namespace hybrid
