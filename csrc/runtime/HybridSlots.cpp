#include "runtime/HybridSlots.h"

#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>

namespace hybrid {
namespace {

std::atomic<uint64_t> g_next_generation{1};
std::atomic<int64_t> g_live_tables{0};

// The installed table. Held by a heap object that is never destroyed, so that
// no static destructor at exit can free a table other threads still read.
struct Installed {
  std::mutex mutex;
  SlotTablePtr table = std::make_shared<SlotTable>("(no rack)", std::vector<SlotInfo>{});
  // Mirrors table->generation(): the lock-free test of every thread's view.
  std::atomic<uint64_t> generation{table->generation()};
};

Installed& installed() {
  static auto* instance = new Installed();
  return *instance;
}

// Each thread's copy of the installed table: reading it is a generation
// compare, and the strong reference keeps it alive while the thread works on
// it even if another thread installs a rack and the old one is dropped. The
// fast path touches only trivially destructible thread-locals (no guard).
thread_local uint64_t t_generation = 0;  // 0: never refreshed (generations start at 1)
thread_local SlotTablePtr* t_table = nullptr;
thread_local SlotTablePtr t_table_owner;  // touched only on refresh

C10_NOINLINE const SlotTablePtr& refresh() {
  Installed& state = installed();
  std::lock_guard<std::mutex> lock(state.mutex);
  t_table_owner = state.table;
  t_table = &t_table_owner;
  t_generation = t_table_owner->generation();
  return t_table_owner;
}

} // namespace

SlotTable::SlotTable(std::string name, std::vector<SlotInfo> slots)
    : generation_(g_next_generation.fetch_add(1)), name_(std::move(name)), slots_(std::move(slots)) {
  TORCH_CHECK(slots_.size() <= static_cast<size_t>(kMaxSlots), "rack ", name_, " has ", slots_.size(),
              " slots; a live rack may have at most ", static_cast<int>(kMaxSlots),
              " (PyTorch device indices are 8-bit)");
  for (size_t i = 0; i < slots_.size(); ++i) {
    TORCH_CHECK(slots_[i].capacity >= 0, "slot ", i, ": capacity must be >= 0, got ", slots_[i].capacity);
    TORCH_CHECK(slots_[i].backing == Backing::Emulated || slots_[i].cuda_index >= 0,
                "slot ", i, ": a cuda backing needs a cuda device index");
  }
  accounts_ = std::make_unique<SlotAccount[]>(slots_.size());
  g_live_tables.fetch_add(1, std::memory_order_relaxed);
}

SlotTable::~SlotTable() { g_live_tables.fetch_sub(1, std::memory_order_relaxed); }

int64_t live_slot_tables() noexcept { return g_live_tables.load(std::memory_order_relaxed); }

void SlotTable::raise_no_slot(c10::DeviceIndex index) const {
  // A RuntimeError, as CUDA's "invalid device ordinal" is.
  TORCH_CHECK(false, "hybrid:", static_cast<int>(index), " is not a slot of the current rack (", slots_.size(),
              " slots: valid indices are 0..", static_cast<int>(slots_.size()) - 1, ")");
}

std::string SlotTable::label(c10::DeviceIndex index) const {
  const SlotInfo& s = slot(index);
  const std::string backing = s.backing == Backing::Emulated
      ? std::string("emulated")
      : "cuda:" + std::to_string(static_cast<int>(s.cuda_index));
  return "hybrid:" + std::to_string(static_cast<int>(index)) + " (" + s.kind + ", " + backing + ")";
}

void install(SlotTablePtr table) {
  TORCH_CHECK(table != nullptr, "install: no slot table");
  Installed& state = installed();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.table = std::move(table);
  state.generation.store(state.table->generation(), std::memory_order_release);
}

const SlotTablePtr& current_table() {
  if (C10_UNLIKELY(t_generation != installed().generation.load(std::memory_order_acquire))) return refresh();
  return *t_table;
}

c10::DeviceIndex slot_count() { return current_table()->size(); }

const SlotInfo& slot_info(c10::DeviceIndex index) { return current_table()->slot(index); }

std::string slot_label(c10::DeviceIndex index) { return current_table()->label(index); }

} // namespace hybrid
