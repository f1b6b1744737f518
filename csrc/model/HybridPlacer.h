#pragma once
// The placing half of the modelled timeline, one Placer per rack: per (slot,
// stream) clocks, markers and waits, host floors, the window of placed records
// and the running totals of those that left it.
//
// A record whose cost is already in the cost table is placed where it is
// recorded, with no Python on the way; any other waits in the log until
// interop.session drains it, and Python's cost model (devices.cost, with its
// sources) prices it once and fills the table. The table caches what the cost
// model said; it never decides a figure.

#include "model/HybridTotals.h"

#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hybrid::timeline {

// One placed item, compact: Python makes a TimelineRecord of it only when someone reads it.
struct Placed {
  int64_t start_ps = 0;
  int64_t duration_ps = 0;
  c10::StreamId stream = 0;
  double measured_s = NAN;    // a cuda-backed slot's CUDA-event time; NaN: modelled
  uint64_t shapes_begin = 0;  // absolute offset into the placer's shape arena
  int32_t cost = -1;          // into the cost table
  uint32_t name = 0;          // string id: the op, kernel, "copy" or collective
  uint32_t participants = 0;  // tuple id of a collective's slots, or of a copy's (src, dst); 0: none
  uint16_t n_inputs = 0;
  uint16_t n_outputs = 0;
  int16_t slot = -1;
  int16_t peer = kNoPeer;
  PlacedKind kind = PlacedKind::Op;
  uint8_t flags = 0;          // RecordFlags of the record it came from
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // as recorded (a copy's record shows it)
};

// Everything a Placer holds is guarded by placer_mutex(); see HybridPlacer.cpp for the lock order.
std::recursive_mutex& placer_mutex();

class Placer {
 public:
  // `kinds`: per slot, the id of its chip kind in the cost table's keys; `projected`: per slot, whether
  // its chip's figures are projected (a copy touching one is).
  Placer(uint64_t rack, std::vector<int32_t> kinds, std::vector<bool> projected);
  ~Placer();
  Placer(const Placer&) = delete;
  Placer& operator=(const Placer&) = delete;

  uint64_t rack() const { return rack_; }
  int32_t kind_of(int slot) const;

  // The window: `limit` records kept (nullopt: all); `auto_fold` false leaves folding to Python (a spill
  // file wants the records written as they leave). `immediate` false sends every record through the log.
  void set_window(std::optional<int64_t> limit, bool auto_fold, bool immediate);
  bool immediate() const { return immediate_; }

  // Placing. Each returns the record's start.
  int64_t place_op(int slot, c10::StreamId stream, uint32_t name, const int64_t* shapes, size_t n_shape_values,
                   uint16_t n_inputs, uint16_t n_outputs, c10::ScalarType dtype, uint8_t flags, int32_t cost,
                   double measured_s);
  int64_t place_kernel(int slot, c10::StreamId stream, int32_t cost);
  int64_t place_copy(int src, c10::StreamId src_stream, int dst, c10::StreamId dst_stream, int64_t nbytes,
                     c10::ScalarType dtype, bool asynchronous, int32_t cost);
  void marker(int slot, c10::StreamId stream, int64_t id);
  void wait(int slot, c10::StreamId stream, int64_t id);
  void release(int64_t id) { markers_.erase(id); }
  // A record placed at a start Python chose (a collective, a transfer between processes).
  void append_at(PlacedKind kind, int slot, c10::StreamId stream, int64_t start_ps, int64_t duration_ps,
                 int32_t cost);
  // Places the op, kernel and within-slot copy records of [begin, end) (placed indices, still held) again,
  // those of slot from[i] on slot to[i]'s stream to_streams[i], at the same costs: the work a data-parallel
  // replica repeats bit for bit (its optimizer step after the all-reduce) while the emulation runs it once.
  // The slots must be of one chip kind each pair (the costs are the kind's); a copy between places or a
  // collective in the range is refused.
  // Returns how many records it placed.
  int64_t replay(int64_t begin, int64_t end, const std::vector<int>& from, const std::vector<int>& to,
                 const std::vector<c10::StreamId>& to_streams);

  // Copy costs depend on this rack's topology: cached per placer, keyed (src, dst, bytes).
  int32_t copy_cost(int src, int dst, int64_t nbytes) const;
  void set_copy_cost(int src, int dst, int64_t nbytes, int32_t cost);
  void clear_copy_costs() { copy_costs_.clear(); }

  // Clocks, markers, host floors.
  int64_t clock(int slot, c10::StreamId stream) const;
  void raise_clock(int slot, c10::StreamId stream, int64_t ps);
  const std::map<std::pair<int, c10::StreamId>, int64_t>& clocks() const { return clocks_; }
  const std::unordered_map<int64_t, std::tuple<int, c10::StreamId, int64_t>>& markers() const { return markers_; }
  int64_t host_floor_ps() const { return host_floor_ps_; }
  void push_hosts();  // every slot a host of its own, until pop_hosts
  void pop_hosts();
  bool hosts_per_slot() const { return !host_floors_.empty(); }
  // Start the work on `keys` when all are free and past the host floors of `hosts` (default: the keys' slots).
  int64_t advance(const std::vector<std::pair<int, c10::StreamId>>& keys, int64_t duration_ps,
                  const std::vector<int>* hosts = nullptr);

  // The window and the totals.
  int64_t placed() const { return placed_; }
  int64_t first() const { return placed_ - static_cast<int64_t>(held_count()); }
  size_t held_count() const { return held_.size() - head_; }
  const Placed& held_at(size_t i) const { return held_[head_ + i]; }  // 0: the oldest held
  const int64_t* shapes_of(const Placed& p) const { return arena_.data() + (p.shapes_begin - arena_base_); }
  void fold(size_t n);  // the n oldest held records into the folded totals
  const Totals& folded() const { return folded_; }
  Totals all() const;   // folded, then the held records, in placement order
  const std::map<int, int64_t>& busy_by_slot() const { return busy_; }

 private:
  void keep(Placed p);
  int64_t advance_one(int slot, c10::StreamId stream, int64_t duration_ps);  // advance() for one stream

  uint64_t rack_;
  std::vector<int32_t> kinds_;
  std::vector<bool> projected_;
  std::optional<int64_t> limit_ = 10000;
  bool auto_fold_ = true;
  bool immediate_ = true;

  std::map<std::pair<int, c10::StreamId>, int64_t> clocks_;
  std::unordered_map<int64_t, std::tuple<int, c10::StreamId, int64_t>> markers_;
  int64_t host_floor_ps_ = 0;
  std::vector<std::map<int, int64_t>> host_floors_;  // a stack: the innermost hosts_per_slot's floors last

  // The held records are held_[head_:]: a fold moves head_, and the folded prefix is dropped only once it
  // outgrows what is held (so a steady loop neither reallocates nor moves the window at every fold). The
  // shape arena keeps a dead prefix the same way; shapes_begin counts from arena_base_.
  std::vector<Placed> held_;
  size_t head_ = 0;
  std::vector<int64_t> arena_;
  uint64_t arena_base_ = 0;
  int64_t placed_ = 0;
  Totals folded_;
  std::map<int, int64_t> busy_;
  std::map<std::tuple<int, int, int64_t>, int32_t> copy_costs_;
};

// The rack's placer, or null (no timeline made for it, or retired). Caller holds placer_mutex().
Placer* placer_for(uint64_t rack);

// The cost table of ops, keyed by everything that decides an op's cost: chip kind, op, dtype, flags,
// tensors-per-list, and every input and output shape. Caller holds placer_mutex().
struct OpCostKey {
  static constexpr size_t kHeader = 7;  // kind, name, dtype, flags, list length, inputs, outputs
  std::vector<int64_t> values;
  size_t hash = 0;
  void build(int32_t kind, uint32_t name, c10::ScalarType dtype, uint8_t flags, int64_t list_length,
             uint32_t n_inputs, uint32_t n_outputs, const int64_t* shapes, size_t n_shape_values);
  // In place, for the hot path: start() leaves room for the header, the caller appends the shapes to
  // `values`, finish() fills the header and hashes; no second copy of the shapes.
  void start() { values.assign(kHeader, 0); }
  void finish(int32_t kind, uint32_t name, c10::ScalarType dtype, uint8_t flags, int64_t list_length,
              uint32_t n_inputs, uint32_t n_outputs);
  const int64_t* shapes() const { return values.data() + kHeader; }
  size_t n_shape_values() const { return values.size() - kHeader; }
};
int32_t op_cost(const OpCostKey& key);  // -1: not priced yet
void set_op_cost(const OpCostKey& key, int32_t cost);

// Every cost the table and the placers hold (devices.cost.cache_clear forgets them).
int32_t add_cost(const Cost& cost);
const Cost& cost_at(int32_t id);
void clear_costs();

} // namespace hybrid::timeline
