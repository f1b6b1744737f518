#pragma once
// What a timeline's records add up to (the C++ half of interop.timeline_totals): per slot, per link
// and per op. Records are added in placement order with the same additions, in the same order, as
// TimelineTotals.add in Python, so a sum of floats is the same float bit for bit whatever the window.

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hybrid::timeline {

enum class PlacedKind : uint8_t { Op = 0, Copy = 1, Kernel = 2, Collective = 3 };
constexpr int16_t kNoPeer = INT16_MIN;  // a record with no other end (peer None in Python)
constexpr double kPsPerSecond = 1e12;   // clocks count integer picoseconds (interop.record_costs.PS)

// A record that kept one slot busy and no other: not a collective, no other slot at its far end.
inline bool on_one_slot(int slot, int peer, uint32_t participants) {
  return participants == 0 && slot >= 0 && (peer == kNoPeer || peer < 0 || peer == slot);
}

// What the Python cost model said about one priced item (devices.cost, collectives.transfer); its
// sources stay in Python, under the same id.
struct Cost {
  int64_t duration_ps = 0;
  double flops = 0;
  double bytes = 0;
  uint32_t name = 0;          // string id of a kernel's or collective's name (0: the record's own)
  uint32_t dtype = 0;         // string id of the estimate's dtype (the record's, for an op or kernel)
  uint32_t link = 0;          // string id of the link track, 0: none
  uint32_t participants = 0;  // tuple id of a collective's slots
  bool by_default = false;
  bool projected = false;
};

// Insertion-ordered map: Python's dicts keep insertion order, and a report walks them so.
template <class K, class V, class H = std::hash<K>>
struct Ordered {
  std::unordered_map<K, size_t, H> index;
  std::vector<std::pair<K, V>> items;
  V& at(const K& k, const V& fresh = V()) {
    // Folding a window adds record after record of one slot and, in a loop, of one op: the last key
    // answers most lookups without hashing.
    if (last_ < items.size() && items[last_].first == k) return items[last_].second;
    auto it = index.find(k);
    if (it != index.end()) {
      last_ = it->second;
      return items[last_].second;
    }
    last_ = items.size();
    index.emplace(k, last_);
    items.emplace_back(k, fresh);
    return items.back().second;
  }

 private:
  size_t last_ = SIZE_MAX;
};

struct OpStats {
  int64_t count = 0;
  int64_t duration_ps = 0;
  double flops = 0;
  double bytes = 0;
  int64_t by_default = 0;
  int64_t first_start_ps = -1;
  int64_t last_end_ps = 0;
};

struct TupleHash {
  template <class T>
  size_t operator()(const T& t) const {
    return std::apply([](const auto&... v) {
      size_t h = 1469598103934665603ull;
      ((h = (h ^ std::hash<std::decay_t<decltype(v)>>()(v)) * 1099511628211ull), ...);
      return h;
    }, t);
  }
};

// The slots a record kept busy (as involved_slots in Python): a collective's participants, else its
// slot and peer (not the host).
std::vector<int> involved_slots(int slot, int peer, uint32_t participants);

struct Totals {
  int64_t records = 0;
  int64_t makespan_ps = 0;
  Ordered<int, int64_t> busy_ps;
  Ordered<int, double> flops;
  Ordered<int, Ordered<uint32_t, double>> flops_by_dtype;
  Ordered<int, int64_t> ops;
  Ordered<int, int64_t> kernels;
  Ordered<int, int64_t> kernel_ps;
  Ordered<int, int64_t> by_default;
  Ordered<int, int64_t> own;
  Ordered<uint32_t, std::array<double, 2>> links;  // [bytes, busy seconds]
  Ordered<std::pair<uint32_t, uint32_t>, std::array<double, 2>, TupleHash> link_groups;  // (link, slots)
  Ordered<std::tuple<int, int64_t, uint8_t, uint32_t>, OpStats, TupleHash> per_op;  // (slot, stream, kind, name)

  void add(PlacedKind kind, int slot, int peer, int64_t stream, uint32_t name, uint32_t participants,
           int64_t start_ps, int64_t duration_ps, const Cost& cost);
};

// Interned tuples of slots (a collective's participants, a copy's ends). Guarded by placer_mutex().
uint32_t intern_slots(const std::vector<int>& slots);
const std::vector<int>& slots_of(uint32_t id);

} // namespace hybrid::timeline
