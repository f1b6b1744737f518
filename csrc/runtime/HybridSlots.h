#pragma once
// The slot tables: what each device index of `hybrid` is (kind, capacity,
// backing) on one rack, and which rack is current.
//
// Every interop.Rack object owns one SlotTable for its whole life: the slots,
// their memory accounting (HybridAccounting.h) and a generation number that no
// other table ever has. Making a rack current installs its table; the table it
// replaces is retired, not destroyed: the storages allocated on it keep a
// strong reference to it, stay counted on its accounts, and can be used again
// once their rack is current again. A table dies with the last of its Rack
// object and its allocations.
//
// The fallback tells a tensor of a retired rack from a current one by one
// pointer compare (owner_of in HybridAllocator.h against current_table()).

#include "runtime/HybridAccounting.h"

#include <c10/core/Device.h>
#include <c10/macros/Macros.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace hybrid {

// The most slots a live rack may have. PyTorch's DeviceIndex is an int8_t, so
// indices 0..126 are usable. Every per-index array in the runtime is sized by
// this, and Python reads it as interop._C.MAX_SLOTS: the one definition.
constexpr c10::DeviceIndex kMaxSlots = std::numeric_limits<c10::DeviceIndex>::max();

enum class Backing : int8_t { Emulated = 0, Cuda = 1 };

struct SlotInfo {
  std::string kind;          // "h100", "trn3", ...
  int64_t capacity = 0;      // bytes the allocator lets this slot hold
  Backing backing = Backing::Emulated;
  c10::DeviceIndex cuda_index = -1;  // the real device behind a Cuda slot
};

class SlotTable {
 public:
  // `name` says which rack this is in messages ("'trn3:2+h100:2'",
  // "'h100-node' (h100:8)"). Validates the slots (count, capacity, backing).
  SlotTable(std::string name, std::vector<SlotInfo> slots);
  ~SlotTable();
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  uint64_t generation() const noexcept { return generation_; }
  const std::string& name() const noexcept { return name_; }
  c10::DeviceIndex size() const noexcept { return static_cast<c10::DeviceIndex>(slots_.size()); }

  // Throw a clear error (naming the valid range) for an index outside the
  // rack. Inline: the fallback asks several times per op.
  const SlotInfo& slot(c10::DeviceIndex index) const {
    if (C10_UNLIKELY(index < 0 || index >= size())) raise_no_slot(index);
    return slots_[index];
  }
  SlotAccount& account(c10::DeviceIndex index) const {
    if (C10_UNLIKELY(index < 0 || index >= size())) raise_no_slot(index);
    return accounts_[index];
  }
  bool is_emulated(c10::DeviceIndex index) const { return slot(index).backing == Backing::Emulated; }

  // "hybrid:2 (h100, emulated)".
  std::string label(c10::DeviceIndex index) const;

 private:
  [[noreturn]] C10_NOINLINE void raise_no_slot(c10::DeviceIndex index) const;

  uint64_t generation_;
  std::string name_;
  std::vector<SlotInfo> slots_;
  std::unique_ptr<SlotAccount[]> accounts_;
};

using SlotTablePtr = std::shared_ptr<SlotTable>;

// Makes `table` the current rack's. Never refused: the table it replaces is
// retired with its allocations intact.
void install(SlotTablePtr table);

// The current rack's table, as this thread sees it. The thread keeps a strong
// reference, so the table stays valid until this thread calls current_table()
// again after another install: an entry point takes it once and passes it down.
const SlotTablePtr& current_table();

// How many tables exist (installed, retired with live allocations, or held by
// a Rack object): what leak tests compare.
int64_t live_slot_tables() noexcept;

// Shorthands on the current table, for code that holds no table of its own.
c10::DeviceIndex slot_count();
const SlotInfo& slot_info(c10::DeviceIndex index);
inline bool is_emulated(c10::DeviceIndex index) {
  return slot_info(index).backing == Backing::Emulated;
}
std::string slot_label(c10::DeviceIndex index);

} // namespace hybrid
