#pragma once
// The op ledger: per rack, ATen op and slot, how often an op ran and by which
// path (a dedicated hybrid kernel, the CPU's own kernel on aliases of the
// slot's bytes, a CPU composite, or real CUDA). A rack's counts are its own,
// as its memory accounting and timeline are: hybrid:0 of one rack is not
// hybrid:0 of another. One thread-local hash probe and one relaxed atomic
// increment per op; read with snapshot() from Python.

#include "runtime/HybridAllocator.h"
#include "runtime/HybridGuard.h"
#include "runtime/HybridSlots.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace hybrid::ledger {

enum class Path : uint8_t {
  Dedicated = 0,     // a kernel registered for the hybrid key itself
  CpuKernel = 1,     // the CPU's own kernel for the op, zero-copy on the slot's bytes
  CpuComposite = 2,  // the op has no CPU kernel: its composite (decomposition) ran on aliases
  Cuda = 3,          // a cuda-backed slot: the CUDA kernel on the real GPU
};
constexpr int kPaths = 4;

// Counts one execution of `op` on `slot` of `rack` by the fallback; the path
// (CPU kernel or composite; CUDA on backed slots) is worked out once per op.
void count_fallback(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot, bool emulated);

// Counts one execution of a dedicated hybrid kernel registered as `name`.
void count_dedicated(const char* name, const SlotTable& rack, c10::DeviceIndex slot);

struct Row {
  std::string op;
  uint64_t rack;          // the SlotTable's generation
  std::string rack_name;  // SlotTable::name(), kept: the rack may be gone when read
  int slot;
  std::string kind;
  int path;
  uint64_t count;
};
std::vector<Row> snapshot();
void reset();

namespace detail {
// Where a dedicated kernel ran: the first hybrid tensor's slot and the rack
// its bytes belong to (a retired rack's tensor copied to the host counts on
// its own rack), or a hybrid device argument's slot on the current rack.
struct Site {
  const SlotTable* rack = nullptr;
  c10::DeviceIndex slot = -1;

  void note(const at::Tensor& t) {
    if (slot >= 0 || !t.defined() || !t.is_privateuseone()) return;
    slot = t.device().index();
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    const SlotTablePtr* owner =
        impl->has_storage() ? owner_of(*impl->unsafe_storage().unsafeGetStorageImpl()) : nullptr;
    rack = owner != nullptr ? owner->get() : current_table().get();
  }
  void note(const std::optional<c10::Device>& d) {
    if (slot >= 0 || !d.has_value() || !d->is_privateuseone()) return;
    slot = d->has_index() ? d->index() : current_slot();
    rack = current_table().get();
  }
  template <typename T>
  void note(const T&) {}
};
} // namespace detail

// A dedicated kernel wrapped so that each call that returns is counted in the
// ledger under the name it is registered with:
// m.impl("view", counted<view>("aten::view")).
template <auto Fn>
struct Counted;

template <typename R, typename... Args, R (*Fn)(Args...)>
struct Counted<Fn> {
  static inline const char* name = nullptr;
  static R call(Args... args) {
    detail::Site site;
    (site.note(args), ...);
    if constexpr (std::is_void_v<R>) {
      Fn(args...);
      if (site.rack != nullptr) count_dedicated(name, *site.rack, site.slot);
    } else {
      R result = Fn(args...);
      if (site.rack != nullptr) count_dedicated(name, *site.rack, site.slot);
      return result;
    }
  }
};

template <auto Fn>
auto counted(const char* registered_name) {
  Counted<Fn>::name = registered_name;
  return &Counted<Fn>::call;
}

} // namespace hybrid::ledger
