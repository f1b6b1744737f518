#pragma once
// Device fidelity: does the slot's real chip compute this op in this dtype?
// The capability table lives in Python (devices.capabilities); the hot path
// only tests one bit (is this dtype ever a concern on this slot?) and, for
// the few (op, slot, dtype) that are, consults a cached decision. The first
// time a combination is met, Python decides (and records the divergence with
// its call site); later calls count in C++ or, in strict mode, raise.
// Masks are the current rack's (set whenever a rack is installed; the fallback
// has refused a retired rack's tensor before it asks); decisions and tallies
// are per rack, as hybrid:0 of one rack need not be the chip of another's.

#include "runtime/HybridSlots.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace hybrid::fidelity {

enum class Decision : uint8_t {
  Native = 0,  // the real chip computes it: nothing to do
  Count = 1,   // a divergence already recorded: count further occurrences
  Refuse = 2,  // strict mode: raise the real stack's error
};

// Python's verdict on a first meeting: (decision, message for Refuse).
using Hook = std::function<std::pair<Decision, std::string>(const std::string& op, uint64_t rack,
                                                            c10::DeviceIndex slot,
                                                            c10::ScalarType dtype)>;

// The dtypes (bit per ScalarType) that any op class treats other than natively on a slot.
void set_mask(c10::DeviceIndex slot, const std::vector<c10::ScalarType>& dtypes);
// No dtype concerns any slot (before the masks of a newly installed rack are set).
void clear_masks();
void set_hook(Hook hook);
// Forgets every cached decision (strict mode or the rack changed).
void reset_decisions();

namespace detail {
extern std::atomic<uint64_t> g_masks[kMaxSlots];
void check_slow(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot, c10::ScalarType dtype);
} // namespace detail

// On the hot path: one load and one bit test unless the dtype concerns the slot.
inline void check(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot,
                  c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::Undefined || slot < 0 || slot >= kMaxSlots) return;
  const auto bit = static_cast<unsigned>(dtype);
  if (bit >= 64) return;
  if ((detail::g_masks[slot].load(std::memory_order_relaxed) >> bit) & 1u) {
    detail::check_slow(op, rack, slot, dtype);
  }
}

// (op, rack generation, slot, dtype, count) of every divergence met, for the report.
std::vector<std::tuple<std::string, uint64_t, int, c10::ScalarType, uint64_t>> counts();
void reset_counts();

} // namespace hybrid::fidelity
