#include "model/HybridTimeline.h"

#include "model/HybridPlacer.h"

#include "runtime/HybridGuard.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace hybrid::timeline {
namespace {

std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_next_marker{1};

struct Log {
  std::mutex mutex;
  std::vector<Record> records;
  std::vector<int64_t> shapes;
  // (record index, events) of ops measured on real GPUs, resolved at drain.
  std::vector<std::pair<size_t, std::unique_ptr<Measurement>>> measurements;
  std::function<double(int64_t, int64_t)> elapsed_hook;
  std::function<void()> drain_hook;
  size_t drain_threshold = 0;  // 0: never drained from the recording thread
  // While a drain places a batch, new records wait in the log behind it (placing them at once would put
  // them ahead of records still being priced).
  bool draining = false;
};

// Interned strings: op names (schemas live as long as their registration, so the pointer is a stable
// key and the lookup stays a hash probe per op), and the names, dtypes and link labels Python prices.
// A leaf lock: nothing is taken while it is held.
struct Names {
  std::mutex mutex;
  std::unordered_map<const void*, uint32_t> ids;
  std::unordered_map<std::string, uint32_t> strings;
  std::vector<std::string> names{""};
};

Names& names() {
  static Names* instance = new Names();  // outlives static destructors of other TUs
  return *instance;
}

thread_local bool t_draining = false;

Log& log() {
  static Log* instance = new Log();  // outlives static destructors of other TUs
  return *instance;
}

uint32_t intern_locked(Names& n, std::string s) {
  auto it = n.strings.find(s);
  if (it != n.strings.end()) return it->second;
  const auto id = static_cast<uint32_t>(n.names.size());
  n.names.push_back(s);
  n.strings.emplace(std::move(s), id);
  return id;
}

uint32_t intern_shared(const c10::OperatorHandle& op);

uint32_t intern(const c10::OperatorHandle& op) {
  // Each thread remembers the ids it has seen: the shared table's lock is taken once per op and thread.
  thread_local std::unordered_map<const void*, uint32_t> seen;
  const auto known = seen.find(&op.schema());
  if (known != seen.end()) return known->second;
  const uint32_t id = intern_shared(op);
  seen.emplace(&op.schema(), id);
  return id;
}

uint32_t intern_shared(const c10::OperatorHandle& op) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mutex);
  const void* key = &op.schema();
  auto it = n.ids.find(key);
  if (it != n.ids.end()) return it->second;
  const auto& name = op.operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  const uint32_t id = intern_locked(n, std::move(full));
  n.ids.emplace(key, id);
  return id;
}

void push_tensor(std::vector<int64_t>& arena, const at::Tensor& t, uint32_t& count) {
  if (!t.defined()) return;
  if (t.layout() == c10::kSparse) {
    // A COO tensor stands as what it holds, not as the dense shape it describes.
    const auto* coo = at::sparse::get_sparse_impl(t);
    push_tensor(arena, coo->indices(), count);
    push_tensor(arena, coo->values(), count);
    return;
  }
  const auto sizes = t.sizes();
  arena.push_back(static_cast<int64_t>(sizes.size()));
  arena.insert(arena.end(), sizes.begin(), sizes.end());
  ++count;
}

// `first_list`, when still negative, receives the length of the first tensor
// list met: a multi-tensor op's shapes arrive flattened, and its cost needs to
// know where one list ends.
uint32_t push_shapes(std::vector<int64_t>& arena, const c10::IValue* values, size_t n, int64_t& first_list) {
  uint32_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = values[i];
    if (v.isTensor()) {
      push_tensor(arena, v.toTensor(), count);
    } else if (v.isTensorList()) {
      const c10::List<at::Tensor> list = v.toTensorList();
      if (first_list < 0) first_list = static_cast<int64_t>(list.size());
      for (const at::Tensor& t : list) push_tensor(arena, t, count);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) push_tensor(arena, e.toTensor(), count);
      }
    }
  }
  return count;
}

Record blank(RecordKind kind, uint64_t rack, c10::DeviceIndex slot) {
  Record r{};
  r.rack = rack;
  r.kind = kind;
  r.dtype = c10::ScalarType::Undefined;
  r.slot = slot;
  r.peer = -1;
  r.stream = slot >= 0 ? current_stream_id(slot) : 0;
  return r;
}

// Shape-less records: one lock, one push.
void append(Record r) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  r.shapes_begin = static_cast<uint32_t>(l.shapes.size());
  l.records.push_back(r);
}

// Called after an op or a copy is appended, outside the lock: past the threshold, the
// drain hook places what is pending (one batch per `drain_threshold` records). Not
// re-entered on a thread that is already draining.
void drain_if_full() {
  if (t_draining) return;
  std::function<void()> hook;
  {
    Log& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.drain_threshold == 0 || l.records.size() < l.drain_threshold || !l.drain_hook) return;
    hook = l.drain_hook;
  }
  struct Draining {
    Draining() { t_draining = true; }
    ~Draining() { t_draining = false; }
  } draining;
  hook();
}

} // namespace

bool enabled() noexcept { return g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on) noexcept { g_enabled.store(on, std::memory_order_relaxed); }

namespace {

// The rack's placer when a record may be placed now: nothing waits in the log ahead of it (the caller
// holds the log's lock and placer_mutex()).
Placer* placing_now(const Log& l, uint64_t rack) {
  if (!l.records.empty() || l.draining) return nullptr;
  Placer* p = placer_for(rack);
  return p != nullptr && p->immediate() ? p : nullptr;
}

} // namespace

namespace {

// Places or logs an op record whose shapes `push(shapes, first_list)` appends to the cost key, returning
// (inputs, outputs): the one body of both record_op overloads.
template <typename PushShapes>
void record_op_with(const c10::OperatorHandle& op, uint64_t rack, c10::DeviceIndex slot, c10::ScalarType dtype,
                    uint8_t flags, std::unique_ptr<Measurement> measured, PushShapes&& push) {
  Record r = blank(RecordKind::Op, rack, slot);
  r.dtype = dtype;
  r.flags = flags;
  r.name = intern(op);
  // The shapes are gathered straight into the cost key (one thread_local, no second copy).
  thread_local OpCostKey key;
  key.start();
  int64_t first_list = -1;
  std::tie(r.n_inputs, r.n_outputs) = push(key.values, first_list);
  r.value = first_list < 0 ? 0 : first_list;
  {
    Log& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    if (!measured) {
      std::lock_guard<std::recursive_mutex> placing(placer_mutex());
      if (Placer* p = placing_now(l, rack)) {
        key.finish(p->kind_of(slot), r.name, dtype, flags, r.value, r.n_inputs, r.n_outputs);
        const int32_t cost = op_cost(key);
        if (cost >= 0) {
          p->place_op(slot, r.stream, r.name, key.shapes(), key.n_shape_values(),
                      static_cast<uint16_t>(r.n_inputs), static_cast<uint16_t>(r.n_outputs), dtype, flags, cost,
                      NAN);
          return;
        }
      }
    }
    r.shapes_begin = static_cast<uint32_t>(l.shapes.size());
    l.shapes.insert(l.shapes.end(), key.shapes(), key.shapes() + key.n_shape_values());
    if (measured) l.measurements.emplace_back(l.records.size(), std::move(measured));
    l.records.push_back(r);
  }
  drain_if_full();
}

} // namespace

void record_op(const c10::OperatorHandle& op, uint64_t rack, c10::DeviceIndex slot,
               const c10::IValue* inputs, size_t n_inputs,
               const c10::IValue* outputs, size_t n_outputs,
               c10::ScalarType dtype, uint8_t flags, std::unique_ptr<Measurement> measured) {
  record_op_with(op, rack, slot, dtype, flags, std::move(measured),
                 [&](std::vector<int64_t>& shapes, int64_t& first_list) {
                   const uint32_t n_in = push_shapes(shapes, inputs, n_inputs, first_list);
                   return std::make_pair(n_in, push_shapes(shapes, outputs, n_outputs, first_list));
                 });
}

void record_op(const c10::OperatorHandle& op, uint64_t rack, c10::DeviceIndex slot,
               const at::Tensor* const* inputs, size_t n_inputs, const at::Tensor& output,
               c10::ScalarType dtype, std::unique_ptr<Measurement> measured) {
  record_op_with(op, rack, slot, dtype, 0, std::move(measured), [&](std::vector<int64_t>& shapes, int64_t&) {
    uint32_t n_in = 0;
    uint32_t n_out = 0;
    for (size_t i = 0; i < n_inputs; ++i) push_tensor(shapes, *inputs[i], n_in);
    push_tensor(shapes, output, n_out);
    return std::make_pair(n_in, n_out);
  });
}

void record_copy(uint64_t rack, c10::DeviceIndex src, c10::DeviceIndex dst, int64_t nbytes,
                 c10::ScalarType dtype, bool asynchronous) {
  Record r = blank(RecordKind::Copy, rack, src);
  r.peer = dst;
  r.peer_stream = dst >= 0 ? current_stream_id(dst) : 0;
  r.value = nbytes;
  r.dtype = dtype;
  r.flags = asynchronous ? kAsync : 0;
  {
    Log& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    std::lock_guard<std::recursive_mutex> placing(placer_mutex());
    if (Placer* p = placing_now(l, rack)) {
      const int32_t cost = p->copy_cost(src, dst, nbytes);
      if (cost >= 0) {
        p->place_copy(src, r.stream, dst, r.peer_stream, nbytes, dtype, asynchronous, cost);
        return;
      }
    }
    r.shapes_begin = static_cast<uint32_t>(l.shapes.size());
    l.records.push_back(r);
  }
  drain_if_full();
}

namespace {

// Markers, waits and releases need no cost: placed at once unless records wait ahead of them.
void place_or_append(Record r, const std::function<void(Placer&)>& place) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  {
    std::lock_guard<std::recursive_mutex> placing(placer_mutex());
    if (Placer* p = placing_now(l, r.rack)) {
      place(*p);
      return;
    }
  }
  r.shapes_begin = static_cast<uint32_t>(l.shapes.size());
  l.records.push_back(r);
}

} // namespace

int64_t record_marker(uint64_t rack, c10::DeviceIndex slot, c10::StreamId stream) {
  Record r = blank(RecordKind::Marker, rack, slot);
  r.stream = stream;
  r.value = g_next_marker.fetch_add(1);
  place_or_append(r, [&](Placer& p) { p.marker(slot, stream, r.value); });
  return r.value;
}

void record_wait(uint64_t rack, c10::DeviceIndex slot, c10::StreamId stream, int64_t marker) {
  Record r = blank(RecordKind::Wait, rack, slot);
  r.stream = stream;
  r.value = marker;
  place_or_append(r, [&](Placer& p) { p.wait(slot, stream, marker); });
}

void record_release(uint64_t rack, int64_t marker) noexcept {
  if (marker < 0) return;
  Record r = blank(RecordKind::Release, rack, -1);
  r.value = marker;
  try {
    place_or_append(r, [&](Placer& p) { p.release(marker); });
  } catch (...) {
    // Out of memory while growing the log: the marker is only kept longer.
  }
}

bool record_kernel(uint64_t rack, c10::DeviceIndex slot, int64_t launch) {
  if (!enabled()) return false;
  // A launch's description is Python's: its record always goes through the log.
  Record r = blank(RecordKind::Kernel, rack, slot);
  r.value = launch;
  append(r);
  return true;
}

Batch drain() {
  Log& l = log();
  Batch out;
  std::vector<std::pair<size_t, std::unique_ptr<Measurement>>> measurements;
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    out.records.swap(l.records);
    out.shapes.swap(l.shapes);
    measurements.swap(l.measurements);
  }
  for (auto& [index, m] : measurements) {
    m->end.synchronize();  // elapsed time needs both events complete
    out.records[index].measured_s = m->start.elapsedTime(m->end) / 1e3;
    out.records[index].flags |= kMeasured;
  }
  return out;
}

namespace {

void place_batch(const Batch& batch, const Resolver& resolve) {
  OpCostKey key;
  for (const Record& r : batch.records) {
    std::unique_lock<std::recursive_mutex> placing(placer_mutex());
    Placer* p = placer_for(r.rack);
    if (p == nullptr) continue;  // a rack nobody holds any more has no timeline to place on
    const int64_t* shapes = batch.shapes.data() + r.shapes_begin;
    switch (r.kind) {
      case RecordKind::Op: {
        size_t n_values = 0;
        for (uint32_t t = 0; t < r.n_inputs + r.n_outputs; ++t) n_values += 1 + shapes[n_values];
        key.build(p->kind_of(r.slot), r.name, r.dtype, r.flags, r.value, r.n_inputs, r.n_outputs, shapes,
                  n_values);
        int32_t cost = op_cost(key);
        if (cost < 0) {
          placing.unlock();  // Python prices it: never hold the placer's lock across the GIL
          cost = resolve(r, shapes);
          placing.lock();
          set_op_cost(key, cost);
          p = placer_for(r.rack);
          if (p == nullptr) continue;
        }
        const double measured = (r.flags & kMeasured) ? r.measured_s : NAN;
        p->place_op(r.slot, r.stream, r.name, shapes, n_values, static_cast<uint16_t>(r.n_inputs),
                    static_cast<uint16_t>(r.n_outputs), r.dtype, r.flags, cost, measured);
        break;
      }
      case RecordKind::Copy: {
        int32_t cost = p->copy_cost(r.slot, r.peer, r.value);
        if (cost < 0) {
          placing.unlock();
          cost = resolve(r, shapes);
          placing.lock();
          p = placer_for(r.rack);
          if (p == nullptr) continue;
          p->set_copy_cost(r.slot, r.peer, r.value, cost);
        }
        p->place_copy(r.slot, r.stream, r.peer, r.peer_stream, r.value, r.dtype, (r.flags & kAsync) != 0, cost);
        break;
      }
      case RecordKind::Kernel: {
        placing.unlock();
        const int32_t cost = resolve(r, shapes);
        placing.lock();
        p = placer_for(r.rack);
        if (p != nullptr) p->place_kernel(r.slot, r.stream, cost);
        break;
      }
      case RecordKind::Marker:
        p->marker(r.slot, r.stream, r.value);
        break;
      case RecordKind::Wait:
        p->wait(r.slot, r.stream, r.value);
        break;
      case RecordKind::Release:
        p->release(r.value);
        break;
    }
  }
}

} // namespace

void place_pending(const Resolver& resolve) {
  Log& l = log();
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.draining) return;  // this thread is already placing (a re-entered drain): it will see these too
    l.draining = true;
  }
  struct Done {
    ~Done() {
      Log& l = log();
      std::lock_guard<std::mutex> lock(l.mutex);
      l.draining = false;
    }
  } done;
  while (true) {
    Batch batch = drain();
    if (batch.records.empty()) {
      std::lock_guard<std::mutex> lock(l.mutex);
      if (l.records.empty()) return;  // checked again under the lock: nothing slipped in
      continue;
    }
    place_batch(batch, resolve);
  }
}

uint32_t intern_string(const std::string& s) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mutex);
  return intern_locked(n, s);
}

std::string name_of(uint32_t id) {
  Names& n = names();
  std::lock_guard<std::mutex> lock(n.mutex);
  TORCH_CHECK(id < n.names.size(), "unknown name id ", id);
  return n.names[id];
}

void set_drain_hook(std::function<void()> hook, size_t threshold) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.drain_hook = std::move(hook);
  l.drain_threshold = threshold;
}

size_t pending() noexcept {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  return l.records.size();
}

void set_elapsed_hook(std::function<double(int64_t, int64_t)> hook) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.elapsed_hook = std::move(hook);
}

double elapsed_ms(int64_t start_marker, int64_t end_marker) {
  std::function<double(int64_t, int64_t)> hook;
  {
    Log& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    hook = l.elapsed_hook;
  }
  TORCH_CHECK(hook, "the modelled timeline is not initialised (import interop first)");
  return hook(start_marker, end_marker);
}

} // namespace hybrid::timeline
