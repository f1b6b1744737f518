#include "runtime/HybridSlots.h"

#include "runtime/HybridAllocator.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <mutex>

namespace hybrid {
namespace {

// Tables are immutable once published and never freed: readers on the hot path
// take a plain atomic load, and a reader that raced a swap still holds a valid
// (old) table. Racks change rarely, so the leak is a few hundred bytes per swap.
struct SlotTable {
  std::vector<SlotInfo> slots;
};

std::atomic<const SlotTable*> g_table{new SlotTable{}};
std::mutex g_install_mutex;

} // namespace

void install_slots(std::vector<SlotInfo> slots) {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  TORCH_CHECK(
      slots.size() <= static_cast<size_t>(std::numeric_limits<c10::DeviceIndex>::max()),
      "a rack may have at most ",
      static_cast<int>(std::numeric_limits<c10::DeviceIndex>::max()),
      " slots in one process, got ", slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    TORCH_CHECK(slots[i].capacity >= 0, "slot ", i, ": capacity must be >= 0");
    TORCH_CHECK(
        slots[i].backing == Backing::Emulated || slots[i].cuda_index >= 0,
        "slot ", i, ": a cuda backing needs a cuda device index");
  }
  const auto live = live_allocation_summary();
  TORCH_CHECK(
      live.empty(),
      "cannot change the rack while hybrid tensors are alive (", live,
      "); delete them (and call gc.collect()) first");
  auto* table = new SlotTable{std::move(slots)};
  const SlotTable* old = g_table.exchange(table, std::memory_order_acq_rel);
  (void)old;  // deliberately leaked, see SlotTable
  reset_slot_stats(static_cast<c10::DeviceIndex>(table->slots.size()));
}

c10::DeviceIndex slot_count() noexcept {
  return static_cast<c10::DeviceIndex>(
      g_table.load(std::memory_order_acquire)->slots.size());
}

const SlotInfo& slot_info(c10::DeviceIndex index) {
  const SlotTable* table = g_table.load(std::memory_order_acquire);
  // A RuntimeError, as CUDA's "invalid device ordinal" is.
  TORCH_CHECK(
      index >= 0 && static_cast<size_t>(index) < table->slots.size(),
      "hybrid:", static_cast<int>(index), " is not a slot of the current rack (",
      table->slots.size(), " slots: valid indices are 0..",
      static_cast<int>(table->slots.size()) - 1, ")");
  return table->slots[index];
}

std::string slot_label(c10::DeviceIndex index) {
  const SlotInfo& s = slot_info(index);
  std::string backing = s.backing == Backing::Emulated
      ? std::string("emulated")
      : "cuda:" + std::to_string(static_cast<int>(s.cuda_index));
  return "hybrid:" + std::to_string(static_cast<int>(index)) + " (" + s.kind +
      ", " + backing + ")";
}

} // namespace hybrid
