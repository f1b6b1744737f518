#include "model/HybridTotals.h"

#include <map>

namespace hybrid::timeline {
namespace {

struct SlotTuples {
  std::map<std::vector<int>, uint32_t> ids;
  std::vector<std::vector<int>> tuples{{}};  // id 0: the empty tuple
};

SlotTuples& tuples() {
  static SlotTuples* instance = new SlotTuples();  // outlives static destructors of other TUs
  return *instance;
}

} // namespace

uint32_t intern_slots(const std::vector<int>& slots) {
  SlotTuples& t = tuples();
  auto it = t.ids.find(slots);
  if (it != t.ids.end()) return it->second;
  const auto id = static_cast<uint32_t>(t.tuples.size());
  t.tuples.push_back(slots);
  t.ids.emplace(slots, id);
  return id;
}

const std::vector<int>& slots_of(uint32_t id) { return tuples().tuples.at(id); }

std::vector<int> involved_slots(int slot, int peer, uint32_t participants) {
  if (participants != 0) {
    std::vector<int> out;
    for (int s : slots_of(participants)) {
      bool seen = false;
      for (int o : out) seen = seen || o == s;
      if (!seen) out.push_back(s);
    }
    return out;
  }
  if (peer == kNoPeer || peer < 0 || peer == slot) {
    return slot >= 0 ? std::vector<int>{slot} : std::vector<int>{};
  }
  return slot >= 0 ? std::vector<int>{slot, peer} : std::vector<int>{peer};
}

void Totals::add(PlacedKind kind, int slot, int peer, int64_t stream, uint32_t name, uint32_t participants,
                 int64_t start_ps, int64_t duration_ps, const Cost& cost) {
  // The order of these additions is TimelineTotals.add's (interop/timeline_totals.py): keep them in step.
  records += 1;
  const int64_t end = start_ps + duration_ps;
  if (end > makespan_ps) makespan_ps = end;
  if (on_one_slot(slot, peer, participants)) {
    busy_ps.at(slot) += duration_ps;  // one slot, the common case: no list of slots to build
  } else {
    for (int s : involved_slots(slot, peer, participants)) busy_ps.at(s) += duration_ps;
  }
  if (kind == PlacedKind::Op || kind == PlacedKind::Kernel) {
    flops.at(slot) += cost.flops;
    flops_by_dtype.at(slot).at(cost.dtype) += cost.flops;
    by_default.at(slot) += cost.by_default ? 1 : 0;
    if (kind == PlacedKind::Op) {
      ops.at(slot) += 1;
    } else {
      kernels.at(slot) += 1;
      kernel_ps.at(slot) += duration_ps;
    }
  }
  if (kind != PlacedKind::Collective && slot >= 0) own.at(slot) += 1;
  if (cost.link != 0) {
    const double seconds = static_cast<double>(duration_ps) / kPsPerSecond;
    auto& link = links.at(cost.link, {0.0, 0.0});
    link[0] += cost.bytes;
    link[1] += seconds;
    const uint32_t group_slots = participants != 0 ? participants : intern_slots({slot, peer == kNoPeer ? -1 : peer});
    auto& group = link_groups.at({cost.link, group_slots}, {0.0, 0.0});
    group[0] += cost.bytes;
    group[1] += seconds;
  }
  OpStats fresh;
  fresh.first_start_ps = start_ps;
  OpStats& stats = per_op.at({slot, stream, static_cast<uint8_t>(kind), name}, fresh);
  stats.count += 1;
  stats.duration_ps += duration_ps;
  stats.flops += cost.flops;
  stats.bytes += cost.bytes;
  stats.by_default += cost.by_default ? 1 : 0;
  if (end > stats.last_end_ps) stats.last_end_ps = end;
}

} // namespace hybrid::timeline
