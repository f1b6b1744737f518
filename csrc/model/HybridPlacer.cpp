#include "model/HybridPlacer.h"

#include "model/HybridTimeline.h"

#include <c10/util/Exception.h>

#include <algorithm>

// Lock order: the log's mutex (HybridTimeline.cpp), then placer_mutex(), then the string table's. Python
// readers take placer_mutex() alone; nothing holding it waits for the log or the GIL.

namespace hybrid::timeline {
namespace {

struct VectorHash {
  size_t operator()(const OpCostKey& k) const { return k.hash; }
};
struct VectorEq {
  bool operator()(const OpCostKey& a, const OpCostKey& b) const { return a.values == b.values; }
};

struct Registry {
  std::unordered_map<uint64_t, Placer*> placers;
  Placer* last = nullptr;  // the current rack's, almost always
  std::unordered_map<OpCostKey, int32_t, VectorHash, VectorEq> op_costs;
  std::vector<Cost> costs;
};

Registry& registry() {
  static Registry* instance = new Registry();  // outlives static destructors of other TUs
  return *instance;
}

} // namespace

std::recursive_mutex& placer_mutex() {
  static std::recursive_mutex* instance = new std::recursive_mutex();
  return *instance;
}

void OpCostKey::build(int32_t kind, uint32_t name, c10::ScalarType dtype, uint8_t flags, int64_t list_length,
                      uint32_t n_inputs, uint32_t n_outputs, const int64_t* shapes, size_t n_shape_values) {
  values.clear();
  values.reserve(kHeader + n_shape_values);
  values.resize(kHeader);
  values.insert(values.end(), shapes, shapes + n_shape_values);
  finish(kind, name, dtype, flags, list_length, n_inputs, n_outputs);
}

void OpCostKey::finish(int32_t kind, uint32_t name, c10::ScalarType dtype, uint8_t flags, int64_t list_length,
                       uint32_t n_inputs, uint32_t n_outputs) {
  int64_t* header = values.data();
  header[0] = kind;
  header[1] = name;
  header[2] = static_cast<int64_t>(dtype);
  header[3] = flags & (kCausal | kSparse);
  header[4] = list_length;
  header[5] = n_inputs;
  header[6] = n_outputs;
  size_t h = 1469598103934665603ull;
  for (int64_t v : values) h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
  hash = h;
}

int32_t op_cost(const OpCostKey& key) {
  const auto& table = registry().op_costs;
  auto it = table.find(key);
  return it == table.end() ? -1 : it->second;
}

void set_op_cost(const OpCostKey& key, int32_t cost) { registry().op_costs[key] = cost; }

int32_t add_cost(const Cost& cost) {
  auto& costs = registry().costs;
  costs.push_back(cost);
  return static_cast<int32_t>(costs.size() - 1);
}

const Cost& cost_at(int32_t id) {
  const auto& costs = registry().costs;
  TORCH_CHECK(id >= 0 && static_cast<size_t>(id) < costs.size(), "unknown timeline cost id ", id);
  return costs[id];
}

void clear_costs() {
  // Held records keep their ids: the entries stay, only the keys that lead to them are forgotten.
  Registry& r = registry();
  r.op_costs.clear();
  for (auto& [rack, placer] : r.placers) placer->clear_copy_costs();
}

Placer* placer_for(uint64_t rack) {
  Registry& r = registry();
  if (r.last != nullptr && r.last->rack() == rack) return r.last;
  auto it = r.placers.find(rack);
  if (it == r.placers.end()) return nullptr;
  r.last = it->second;
  return it->second;
}

Placer::Placer(uint64_t rack, std::vector<int32_t> kinds, std::vector<bool> projected)
    : rack_(rack), kinds_(std::move(kinds)), projected_(std::move(projected)) {
  std::lock_guard<std::recursive_mutex> lock(placer_mutex());
  Registry& r = registry();
  r.placers[rack] = this;  // a reset timeline's new placer replaces the old one
  r.last = this;
}

Placer::~Placer() {
  std::lock_guard<std::recursive_mutex> lock(placer_mutex());
  Registry& r = registry();
  auto it = r.placers.find(rack_);
  if (it != r.placers.end() && it->second == this) r.placers.erase(it);
  if (r.last == this) r.last = nullptr;
}

int32_t Placer::kind_of(int slot) const {
  TORCH_CHECK(slot >= 0 && static_cast<size_t>(slot) < kinds_.size(), "slot ", slot, " is not on rack ", rack_);
  return kinds_[slot];
}

void Placer::set_window(std::optional<int64_t> limit, bool auto_fold, bool immediate) {
  limit_ = limit;
  auto_fold_ = auto_fold;
  immediate_ = immediate;
  if (auto_fold_ && limit_ && static_cast<int64_t>(held_count()) > *limit_) fold(held_count() - *limit_);
}

int64_t Placer::clock(int slot, c10::StreamId stream) const {
  auto it = clocks_.find({slot, stream});
  return it == clocks_.end() ? 0 : it->second;
}

void Placer::raise_clock(int slot, c10::StreamId stream, int64_t ps) {
  int64_t& t = clocks_[{slot, stream}];
  t = std::max(t, ps);
}

int64_t Placer::advance(const std::vector<std::pair<int, c10::StreamId>>& keys, int64_t duration_ps,
                        const std::vector<int>* hosts) {
  int64_t floor = host_floor_ps_;
  if (!host_floors_.empty()) {
    const auto& floors = host_floors_.back();
    auto floor_of = [&](int s) {
      auto it = floors.find(s);
      return it == floors.end() ? int64_t{0} : it->second;
    };
    int64_t most = 0;
    if (hosts != nullptr && !hosts->empty()) {
      for (int s : *hosts) most = std::max(most, floor_of(s));
    } else {
      for (const auto& k : keys) most = std::max(most, floor_of(k.first));
    }
    floor = std::max(floor, most);
  }
  int64_t start = 0;
  for (const auto& k : keys) start = std::max(start, clock(k.first, k.second));
  start = std::max(start, floor);
  for (const auto& k : keys) clocks_[k] = start + duration_ps;
  return start;
}

void Placer::keep(Placed p) {
  if (on_one_slot(p.slot, p.peer, p.participants)) {
    busy_[p.slot] += p.duration_ps;  // one slot, the common case: no list of slots to build
  } else {
    for (int s : involved_slots(p.slot, p.peer, p.participants)) busy_[s] += p.duration_ps;
  }
  held_.push_back(p);
  ++placed_;
  if (auto_fold_ && limit_) {
    const int64_t slack = std::max<int64_t>(64, *limit_ / 8);  // interop.timelines.fold_slack
    if (static_cast<int64_t>(held_count()) > *limit_ + slack) fold(held_count() - *limit_);
  }
}

void Placer::fold(size_t n) {
  n = std::min(n, held_count());
  if (n == 0) return;
  for (size_t i = head_; i < head_ + n; ++i) {
    const Placed& p = held_[i];
    folded_.add(p.kind, p.slot, p.peer, p.stream, p.name, p.participants, p.start_ps, p.duration_ps,
                cost_at(p.cost));
  }
  head_ += n;
  if (head_ >= held_count()) {
    held_.erase(held_.begin(), held_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  const uint64_t keep_from = held_count() == 0 ? arena_base_ + arena_.size() : held_at(0).shapes_begin;
  const size_t dead = static_cast<size_t>(keep_from - arena_base_);
  if (dead >= arena_.size() - dead) {
    arena_.erase(arena_.begin(), arena_.begin() + static_cast<std::ptrdiff_t>(dead));
    arena_base_ = keep_from;
  }
}

Totals Placer::all() const {
  Totals out = folded_;
  for (size_t i = head_; i < held_.size(); ++i) {
    const Placed& p = held_[i];
    out.add(p.kind, p.slot, p.peer, p.stream, p.name, p.participants, p.start_ps, p.duration_ps, cost_at(p.cost));
  }
  return out;
}

int64_t Placer::advance_one(int slot, c10::StreamId stream, int64_t duration_ps) {
  int64_t floor = host_floor_ps_;
  if (!host_floors_.empty()) {
    const auto& floors = host_floors_.back();
    auto it = floors.find(slot);
    if (it != floors.end()) floor = std::max(floor, it->second);
  }
  int64_t& clock = clocks_[{slot, stream}];  // one lookup: a new stream starts at 0
  const int64_t start = std::max(clock, floor);
  clock = start + duration_ps;
  return start;
}

int64_t Placer::place_op(int slot, c10::StreamId stream, uint32_t name, const int64_t* shapes,
                         size_t n_shape_values, uint16_t n_inputs, uint16_t n_outputs, c10::ScalarType dtype,
                         uint8_t flags, int32_t cost, double measured_s) {
  const Cost& c = cost_at(cost);
  // A real GPU's slot follows measured time; an emulated one, modelled time (round half to even, as Python).
  const int64_t duration = std::isnan(measured_s) ? c.duration_ps
                                                  : static_cast<int64_t>(std::nearbyint(measured_s * kPsPerSecond));
  Placed p;
  p.start_ps = advance_one(slot, stream, duration);
  p.duration_ps = duration;
  p.stream = stream;
  p.measured_s = measured_s;
  p.shapes_begin = arena_base_ + arena_.size();
  arena_.insert(arena_.end(), shapes, shapes + n_shape_values);
  p.cost = cost;
  p.name = name;
  p.n_inputs = n_inputs;
  p.n_outputs = n_outputs;
  p.slot = static_cast<int16_t>(slot);
  p.kind = PlacedKind::Op;
  p.flags = flags;
  p.dtype = dtype;
  keep(p);
  return p.start_ps;
}

int64_t Placer::place_kernel(int slot, c10::StreamId stream, int32_t cost) {
  const Cost& c = cost_at(cost);
  Placed p;
  p.start_ps = advance_one(slot, stream, c.duration_ps);
  p.duration_ps = c.duration_ps;
  p.stream = stream;
  p.shapes_begin = arena_base_ + arena_.size();
  p.cost = cost;
  p.name = c.name;
  p.slot = static_cast<int16_t>(slot);
  p.kind = PlacedKind::Kernel;
  keep(p);
  return p.start_ps;
}

int64_t Placer::place_copy(int src, c10::StreamId src_stream, int dst, c10::StreamId dst_stream, int64_t nbytes,
                           c10::ScalarType dtype, bool asynchronous, int32_t cost) {
  const Cost& c = cost_at(cost);
  const bool host_end = src < 0 || dst < 0;
  std::vector<std::pair<int, c10::StreamId>> keys;
  if (src >= 0) keys.emplace_back(src, src_stream);
  if (dst >= 0 && !(dst == src && dst_stream == src_stream)) keys.emplace_back(dst, dst_stream);
  // Between slots with hosts of their own, the receiver's host is the one that waits (the sender posted
  // its send when its data was ready, which the send stream already waits for).
  const std::vector<int> receiver{dst};
  const bool receiver_waits = hosts_per_slot() && !host_end && src != dst;
  Placed p;
  p.start_ps = advance(keys, c.duration_ps, receiver_waits ? &receiver : nullptr);
  p.duration_ps = c.duration_ps;
  p.stream = src >= 0 ? src_stream : dst_stream;
  p.shapes_begin = arena_base_ + arena_.size();
  arena_.insert(arena_.end(), {1, nbytes});  // ((nbytes,),) in and out, as the record shows
  p.n_inputs = 1;
  p.cost = cost;
  p.name = c.name;
  p.slot = static_cast<int16_t>(src);
  p.peer = static_cast<int16_t>(dst);
  p.kind = PlacedKind::Copy;
  p.flags = asynchronous ? kAsync : 0;
  p.dtype = dtype;
  keep(p);
  if (host_end && !asynchronous) {
    // A synchronous copy returns to the host only when done: later work starts after it.
    const int64_t end = p.start_ps + p.duration_ps;
    if (host_floors_.empty()) {
      host_floor_ps_ = std::max(host_floor_ps_, end);
    } else {
      for (const auto& k : keys) {
        int64_t& f = host_floors_.back()[k.first];
        f = std::max(f, end);
      }
    }
  }
  return p.start_ps;
}

void Placer::append_at(PlacedKind kind, int slot, c10::StreamId stream, int64_t start_ps, int64_t duration_ps,
                       int32_t cost) {
  const Cost& c = cost_at(cost);
  Placed p;
  p.start_ps = start_ps;
  p.duration_ps = duration_ps;
  p.stream = stream;
  p.shapes_begin = arena_base_ + arena_.size();
  p.cost = cost;
  p.name = c.name;
  p.participants = c.participants;
  p.slot = static_cast<int16_t>(slot);
  p.kind = kind;
  keep(p);
}

int64_t Placer::replay(int64_t begin, int64_t end, const std::vector<int>& from, const std::vector<int>& to,
                       const std::vector<c10::StreamId>& to_streams) {
  TORCH_CHECK(from.size() == to.size() && to.size() == to_streams.size(),
              "replay: from, to and to_streams must be as long as each other");
  for (size_t i = 0; i < from.size(); ++i) {
    TORCH_CHECK(kind_of(from[i]) == kind_of(to[i]), "replay: slot ", from[i], " and slot ", to[i],
                " are different chip kinds: their costs differ");
  }
  TORCH_CHECK(begin <= end && end <= placed_, "replay: [", begin, ", ", end, ") is not a range of the ", placed_,
              " records placed");
  TORCH_CHECK(begin >= first(), "replay: records from ", begin, " have left the window (it holds those from ",
              first(), "); a larger window keeps them");
  // Copied out first: keep() may fold the records read here.
  struct Item {
    Placed p;
    std::vector<int64_t> shapes;
  };
  std::vector<Item> items;
  const size_t lo = static_cast<size_t>(begin - first());
  const size_t hi = static_cast<size_t>(end - first());
  items.reserve(hi - lo);
  for (size_t i = lo; i < hi; ++i) {
    const Placed& p = held_at(i);
    // A copy within one slot costs what its chip kind's memory does (no link): it repeats like an op.
    const bool local_copy = p.kind == PlacedKind::Copy && p.slot == p.peer;
    TORCH_CHECK(p.kind == PlacedKind::Op || p.kind == PlacedKind::Kernel || local_copy,
                "replay: only ops, kernels and copies within a slot are repeated; record ",
                first() + static_cast<int64_t>(i), " is a copy between places or a collective");
    const uint64_t stop = i + 1 < held_count() ? held_at(i + 1).shapes_begin : arena_base_ + arena_.size();
    const int64_t* shapes = shapes_of(p);
    items.push_back(Item{p, std::vector<int64_t>(shapes, shapes + (stop - p.shapes_begin))});
  }
  for (Item& item : items) {
    const auto at = std::find(from.begin(), from.end(), static_cast<int>(item.p.slot));
    TORCH_CHECK(at != from.end(), "replay: record on slot ", item.p.slot, ", which `from` does not name");
    const size_t k = static_cast<size_t>(at - from.begin());
    Placed p = item.p;
    p.slot = static_cast<int16_t>(to[k]);
    if (p.kind == PlacedKind::Copy) p.peer = p.slot;
    p.stream = to_streams[k];
    p.start_ps = advance_one(to[k], to_streams[k], p.duration_ps);
    p.shapes_begin = arena_base_ + arena_.size();
    arena_.insert(arena_.end(), item.shapes.begin(), item.shapes.end());
    keep(p);
  }
  return static_cast<int64_t>(items.size());
}

void Placer::marker(int slot, c10::StreamId stream, int64_t id) { markers_[id] = {slot, stream, clock(slot, stream)}; }

void Placer::wait(int slot, c10::StreamId stream, int64_t id) {
  auto it = markers_.find(id);
  if (it != markers_.end()) raise_clock(slot, stream, std::get<2>(it->second));
}

int32_t Placer::copy_cost(int src, int dst, int64_t nbytes) const {
  auto it = copy_costs_.find({src, dst, nbytes});
  return it == copy_costs_.end() ? -1 : it->second;
}

void Placer::set_copy_cost(int src, int dst, int64_t nbytes, int32_t cost) { copy_costs_[{src, dst, nbytes}] = cost; }

void Placer::push_hosts() { host_floors_.emplace_back(); }

void Placer::pop_hosts() {
  TORCH_CHECK(!host_floors_.empty(), "pop_hosts without push_hosts");
  std::map<int, int64_t> floors = std::move(host_floors_.back());
  host_floors_.pop_back();
  if (host_floors_.empty()) {
    for (const auto& [s, t] : floors) host_floor_ps_ = std::max(host_floor_ps_, t);
  } else {
    for (const auto& [s, t] : floors) {
      int64_t& f = host_floors_.back()[s];
      f = std::max(f, t);
    }
  }
}

} // namespace hybrid::timeline
