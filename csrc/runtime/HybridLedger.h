#pragma once
// The op ledger: per ATen op and slot, how often it ran and by which path
// (a dedicated hybrid kernel, the CPU's own kernel on aliases of the slot's
// bytes, a CPU composite, or real CUDA). One thread-local hash probe and one
// relaxed atomic increment per op; read with snapshot() from Python.

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hybrid::ledger {

enum class Path : uint8_t {
  Dedicated = 0,     // a kernel registered for the hybrid key itself
  CpuKernel = 1,     // the CPU's own kernel for the op, zero-copy on the slot's bytes
  CpuComposite = 2,  // the op has no CPU kernel: its composite (decomposition) ran on aliases
  Cuda = 3,          // a cuda-backed slot: the CUDA kernel on the real GPU
};
constexpr int kPaths = 4;

// Counts one execution of `op` on `slot` by the fallback; the path (CPU
// kernel or composite; CUDA on backed slots) is worked out once per op.
void count_fallback(const c10::OperatorHandle& op, c10::DeviceIndex slot, bool emulated);

// Counts one execution of a dedicated hybrid kernel registered as `name`.
void count_dedicated(const char* name, c10::DeviceIndex slot);

struct Row {
  std::string op;
  int slot;
  int path;
  uint64_t count;
};
std::vector<Row> snapshot();
void reset();

} // namespace hybrid::ledger

#include "runtime/HybridGuard.h"

#include <ATen/core/Tensor.h>

#include <optional>

namespace hybrid::ledger {
namespace detail {
inline c10::DeviceIndex slot_of_arg(const at::Tensor& t) {
  return t.defined() && t.is_privateuseone() ? t.device().index() : static_cast<c10::DeviceIndex>(-1);
}
inline c10::DeviceIndex slot_of_arg(const std::optional<c10::Device>& d) {
  if (!d.has_value() || !d->is_privateuseone()) return -1;
  return d->has_index() ? d->index() : current_slot();
}
template <typename T>
c10::DeviceIndex slot_of_arg(const T&) {
  return -1;
}
} // namespace detail

// A dedicated kernel wrapped so that each call is counted in the ledger
// under the name it is registered with: m.impl("view", counted<view>("aten::view")).
template <auto Fn>
struct Counted;

template <typename R, typename... Args, R (*Fn)(Args...)>
struct Counted<Fn> {
  static inline const char* name = nullptr;
  static R call(Args... args) {
    c10::DeviceIndex slot = -1;
    ((slot = slot >= 0 ? slot : detail::slot_of_arg(args)), ...);
    count_dedicated(name, slot);
    return Fn(args...);
  }
};

template <auto Fn>
auto counted(const char* registered_name) {
  Counted<Fn>::name = registered_name;
  return &Counted<Fn>::call;
}

} // namespace hybrid::ledger
