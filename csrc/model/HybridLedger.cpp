#include "model/HybridLedger.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace hybrid::ledger {
namespace {

// One op on one rack. Created the first time the op runs on that rack, never
// freed (a handful per op and rack; rows of a rack nobody holds any more stay
// readable).
struct Entry {
  std::string name;
  uint64_t rack = 0;
  std::string rack_name;
  std::vector<std::string> kinds;  // of the rack's slots
  Path emulated_path = Path::CpuKernel;
  std::unique_ptr<std::atomic<uint64_t>[]> counts;  // kinds.size() * kPaths

  void bump(c10::DeviceIndex slot, Path path) {
    if (slot < 0 || static_cast<size_t>(slot) >= kinds.size()) return;
    counts[static_cast<size_t>(slot) * kPaths + static_cast<size_t>(path)].fetch_add(
        1, std::memory_order_relaxed);
  }
};

struct Key {
  const void* op;  // the op's schema, or a dedicated kernel's name literal
  uint64_t rack;
  bool operator==(const Key& o) const noexcept { return op == o.op && rack == o.rack; }
};
struct KeyHash {
  size_t operator()(const Key& k) const noexcept {
    return std::hash<const void*>()(k.op) ^ (std::hash<uint64_t>()(k.rack) * 0x9E3779B97F4A7C15ull);
  }
};

// The table is locked only to add or read entries.
struct Table {
  std::mutex mutex;
  std::unordered_map<Key, Entry*, KeyHash> entries;
  std::vector<std::unique_ptr<Entry>> owned;
};

Table& table() {
  static Table* instance = new Table();  // outlives static destructors of other TUs
  return *instance;
}

using LocalMap = std::unordered_map<const void*, Entry*>;

// This thread's entries, per rack; the current rack's map is one compare away.
struct LocalCache {
  uint64_t rack = 0;  // generations start at 1
  LocalMap* map = nullptr;
  std::unordered_map<uint64_t, LocalMap> by_rack;

  LocalMap& of(uint64_t generation) {
    if (generation != rack) {
      map = &by_rack[generation];
      rack = generation;
    }
    return *map;
  }
};

// The entry of (`op`, `rack`), from this thread's cache (no lock) or, the first
// time this thread meets the pair, from the shared table; `path_of` says how
// the op runs on an emulated slot.
template <typename PathOf>
Entry* entry_for(const void* op, const SlotTable& rack, PathOf&& path_of) {
  thread_local LocalCache cache;
  LocalMap& local = cache.of(rack.generation());
  auto it = local.find(op);
  if (it != local.end()) return it->second;
  Table& t = table();
  Entry* e = nullptr;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    const Key key{op, rack.generation()};
    auto found = t.entries.find(key);
    if (found != t.entries.end()) {
      e = found->second;
    } else {
      auto fresh = std::make_unique<Entry>();
      auto [name, path] = path_of();
      fresh->name = std::move(name);
      fresh->emulated_path = path;
      fresh->rack = rack.generation();
      fresh->rack_name = rack.name();
      for (c10::DeviceIndex i = 0; i < rack.size(); ++i) fresh->kinds.push_back(rack.slot(i).kind);
      fresh->counts = std::make_unique<std::atomic<uint64_t>[]>(fresh->kinds.size() * kPaths);
      e = fresh.get();
      t.entries.emplace(key, e);
      t.owned.push_back(std::move(fresh));
    }
  }
  local.emplace(op, e);
  return e;
}

} // namespace

void count_fallback(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot, bool emulated) {
  // The schema lives as long as the op's registration: a stable key.
  Entry* e = entry_for(&op.schema(), rack, [&op]() {
    const auto& n = op.operator_name();
    return std::make_pair(n.overload_name.empty() ? n.name : n.name + "." + n.overload_name,
                          op.hasKernelForDispatchKey(c10::DispatchKey::CPU) ? Path::CpuKernel
                                                                            : Path::CpuComposite);
  });
  e->bump(slot, emulated ? e->emulated_path : Path::Cuda);
}

void count_dedicated(const char* name, const SlotTable& rack, c10::DeviceIndex slot) {
  // A kernel's name is a string literal: its address is the key.
  Entry* e = entry_for(name, rack, [name]() { return std::make_pair(std::string(name), Path::Dedicated); });
  e->bump(slot, Path::Dedicated);
}

std::vector<Row> snapshot() {
  Table& t = table();
  std::vector<Row> rows;
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& e : t.owned) {
    for (size_t slot = 0; slot < e->kinds.size(); ++slot) {
      for (int path = 0; path < kPaths; ++path) {
        const uint64_t n = e->counts[slot * kPaths + path].load(std::memory_order_relaxed);
        if (n != 0) {
          rows.push_back(Row{e->name, e->rack, e->rack_name, static_cast<int>(slot), e->kinds[slot], path, n});
        }
      }
    }
  }
  return rows;
}

void reset() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  for (const auto& e : t.owned) {
    for (size_t i = 0; i < e->kinds.size() * kPaths; ++i) e->counts[i].store(0, std::memory_order_relaxed);
  }
}

} // namespace hybrid::ledger
