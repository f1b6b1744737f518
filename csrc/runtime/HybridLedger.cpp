#include "runtime/HybridLedger.h"

#include "runtime/HybridSlots.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace hybrid::ledger {
namespace {

constexpr int kSlots = kMaxSlotIndex + 1;

struct Entry {
  std::string name;
  Path emulated_path = Path::CpuKernel;
  std::array<std::atomic<uint64_t>, kSlots * kPaths> counts{};
};

// Entries are created once per op and never freed (the dispatcher's ops
// outlive every thread); the table is locked only to add or read entries.
struct Table {
  std::mutex mutex;
  std::unordered_map<const void*, Entry*> entries;
  std::vector<std::unique_ptr<Entry>> owned;
};

Table& table() {
  static Table* instance = new Table();  // outlives static destructors of other TUs
  return *instance;
}

// The entry of `key`, from this thread's cache (no lock) or, the first time
// this thread meets the op, from the shared table; `make` fills a new entry.
template <typename Make>
Entry* entry_for(const void* key, Make&& make) {
  thread_local std::unordered_map<const void*, Entry*> local;
  auto it = local.find(key);
  if (it != local.end()) return it->second;
  Table& t = table();
  Entry* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    auto found = t.entries.find(key);
    if (found != t.entries.end()) {
      e = found->second;
    } else {
      auto owned = std::make_unique<Entry>();
      make(*owned);
      e = owned.get();
      t.entries.emplace(key, e);
      t.owned.push_back(std::move(owned));
    }
  }
  local.emplace(key, e);
  return e;
}

void bump(Entry* e, c10::DeviceIndex slot, Path path) {
  if (slot < 0 || slot >= kSlots) return;
  e->counts[static_cast<size_t>(slot) * kPaths + static_cast<size_t>(path)].fetch_add(
      1, std::memory_order_relaxed);
}

} // namespace

void count_fallback(const c10::OperatorHandle& op, c10::DeviceIndex slot, bool emulated) {
  // The schema lives as long as the op's registration: a stable key.
  Entry* e = entry_for(&op.schema(), [&op](Entry& fresh) {
    const auto& n = op.operator_name();
    fresh.name = n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
    fresh.emulated_path = op.hasKernelForDispatchKey(c10::DispatchKey::CPU) ? Path::CpuKernel
                                                                            : Path::CpuComposite;
  });
  bump(e, slot, emulated ? e->emulated_path : Path::Cuda);
}

void count_dedicated(const char* name, c10::DeviceIndex slot) {
  // A kernel's name is a string literal: its address is the key.
  Entry* e = entry_for(name, [name](Entry& fresh) {
    fresh.name = name;
    fresh.emulated_path = Path::Dedicated;
  });
  bump(e, slot, Path::Dedicated);
}

std::vector<Row> snapshot() {
  Table& t = table();
  std::vector<Row> rows;
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& e : t.owned) {
    for (int slot = 0; slot < kSlots; ++slot) {
      for (int path = 0; path < kPaths; ++path) {
        const uint64_t n = e->counts[static_cast<size_t>(slot) * kPaths + path].load(
            std::memory_order_relaxed);
        if (n != 0) rows.push_back(Row{e->name, slot, path, n});
      }
    }
  }
  return rows;
}

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& e : t.owned) {
    for (auto& c : e->counts) c.store(0, std::memory_order_relaxed);
  }
}

} // namespace hybrid::ledger
