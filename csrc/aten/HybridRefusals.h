#pragma once
// What an emulated slot refuses, and what last failed on a slot.
//
// Some ATen ops exist only for CUDA in torch (cuDNN and MIOpen kernels, the
// fused attention kernels, cuSPARSELt...): an emulated slot runs CPU kernels
// and has none to run. Their table (op -> what to use instead) is set once
// from Python (interop/cuda_only_ops.py), which also owns the test that every
// CUDA-only op of the installed torch is either in it or has a kernel of ours.
//
// The op that last raised on a slot is kept, with its message, so that the
// report of a crashed run can name it.

#include "runtime/HybridSlots.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <string>
#include <tuple>
#include <unordered_map>

namespace hybrid::refusals {

// Replaces the table of CUDA-only ops: "aten::name" -> what to use instead.
void set_cuda_only(std::unordered_map<std::string, std::string> instead);

// Throws NotImplementedError naming the op, the slot and what to use instead.
[[noreturn]] C10_NOINLINE void refuse_cuda_only(const c10::OperatorHandle& op, const SlotTable& rack,
                                                c10::DeviceIndex slot);

// Remembers that `op` raised `message` on `slot` (-1: before a slot was known).
C10_NOINLINE void note_failure(const std::string& op, c10::DeviceIndex slot, const char* message) noexcept;

// Runs `body(slot)`, which sets `slot` once it knows it, and notes what it raises as `op`'s failure there.
template <typename Body>
void noting_failure(const c10::OperatorHandle& op, Body&& body) {
  c10::DeviceIndex slot = -1;
  try {
    body(slot);
  } catch (const c10::Error& e) {
    note_failure(op.operator_name().name, slot, e.what_without_backtrace());
    throw;
  } catch (const std::exception& e) {
    note_failure(op.operator_name().name, slot, e.what());
    throw;
  }
}

// (op, slot, message) of the last failure noted in this process; op is empty when none was.
std::tuple<std::string, int, std::string> last_failure();
void clear_last_failure();

} // namespace hybrid::refusals
