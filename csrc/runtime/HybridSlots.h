#pragma once
// The slot table: what each device index of `hybrid` is (kind, capacity,
// backing). Python installs a table when a rack becomes current; the hot path
// only reads it.

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hybrid {

enum class Backing : int8_t { Emulated = 0, Cuda = 1 };

// DeviceIndex is an int8_t: indices 0..126 are usable (127 slots at most).
constexpr c10::DeviceIndex kMaxSlotIndex = 126;

struct SlotInfo {
  std::string kind;          // "h100", "trn3", ...
  int64_t capacity = 0;      // bytes the allocator lets this slot hold
  Backing backing = Backing::Emulated;
  c10::DeviceIndex cuda_index = -1;  // the real device behind a Cuda slot
};

// Replaces the whole table. Refuses (throws) while any slot still holds
// allocations: their storages would outlive the slot they are counted on.
void install_slots(std::vector<SlotInfo> slots);

c10::DeviceIndex slot_count() noexcept;

// Throws a clear error naming the valid range for a bad index.
const SlotInfo& slot_info(c10::DeviceIndex index);

inline bool is_emulated(c10::DeviceIndex index) {
  return slot_info(index).backing == Backing::Emulated;
}

// Human label used in error messages: "hybrid:2 (h100, emulated)".
std::string slot_label(c10::DeviceIndex index);

} // namespace hybrid
