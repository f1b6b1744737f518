#include "model/HybridTimeline.h"

#include "runtime/HybridGuard.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace hybrid::timeline {
namespace {

std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_next_marker{1};

struct Log {
  std::mutex mutex;
  std::vector<Record> records;
  std::vector<int64_t> shapes;
  // Interned op names: schemas live as long as their registration, so the
  // pointer is a stable key and the lookup stays a hash probe per op.
  std::unordered_map<const void*, uint32_t> ids;
  std::vector<std::string> names{""};
  // (record index, events) of ops measured on real GPUs, resolved at drain.
  std::vector<std::pair<size_t, std::unique_ptr<Measurement>>> measurements;
  std::function<double(int64_t, int64_t)> elapsed_hook;
  std::function<void()> drain_hook;
  size_t drain_threshold = 0;  // 0: never drained from the recording thread
};

thread_local bool t_draining = false;

Log& log() {
  static Log* instance = new Log();  // outlives static destructors of other TUs
  return *instance;
}

uint32_t intern(Log& l, const c10::OperatorHandle& op) {
  const void* key = &op.schema();
  auto it = l.ids.find(key);
  if (it != l.ids.end()) return it->second;
  const auto& name = op.operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  const auto id = static_cast<uint32_t>(l.names.size());
  l.names.push_back(std::move(full));
  l.ids.emplace(key, id);
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

void record_op(const c10::OperatorHandle& op, uint64_t rack, c10::DeviceIndex slot,
               const c10::IValue* inputs, size_t n_inputs,
               const c10::IValue* outputs, size_t n_outputs,
               c10::ScalarType dtype, uint8_t flags, std::unique_ptr<Measurement> measured) {
  Record r = blank(RecordKind::Op, rack, slot);
  r.dtype = dtype;
  r.flags = flags;
  {
    Log& l = log();
    std::lock_guard<std::mutex> lock(l.mutex);
    r.name = intern(l, op);
    r.shapes_begin = static_cast<uint32_t>(l.shapes.size());
    int64_t first_list = -1;
    r.n_inputs = push_shapes(l.shapes, inputs, n_inputs, first_list);
    r.n_outputs = push_shapes(l.shapes, outputs, n_outputs, first_list);
    r.value = first_list < 0 ? 0 : first_list;
    if (measured) l.measurements.emplace_back(l.records.size(), std::move(measured));
    l.records.push_back(r);
  }
  drain_if_full();
}

void record_copy(uint64_t rack, c10::DeviceIndex src, c10::DeviceIndex dst, int64_t nbytes,
                 c10::ScalarType dtype, bool asynchronous) {
  Record r = blank(RecordKind::Copy, rack, src);
  r.peer = dst;
  r.peer_stream = dst >= 0 ? current_stream_id(dst) : 0;
  r.value = nbytes;
  r.dtype = dtype;
  r.flags = asynchronous ? kAsync : 0;
  append(r);
  drain_if_full();
}

int64_t record_marker(uint64_t rack, c10::DeviceIndex slot, c10::StreamId stream) {
  Record r = blank(RecordKind::Marker, rack, slot);
  r.stream = stream;
  r.value = g_next_marker.fetch_add(1);
  append(r);
  return r.value;
}

void record_wait(uint64_t rack, c10::DeviceIndex slot, c10::StreamId stream, int64_t marker) {
  Record r = blank(RecordKind::Wait, rack, slot);
  r.stream = stream;
  r.value = marker;
  append(r);
}

void record_release(uint64_t rack, int64_t marker) noexcept {
  if (marker < 0) return;
  Record r = blank(RecordKind::Release, rack, -1);
  r.value = marker;
  try {
    append(r);
  } catch (...) {
    // Out of memory while growing the log: the marker is only kept longer.
  }
}

bool record_kernel(uint64_t rack, c10::DeviceIndex slot, int64_t launch) {
  if (!enabled()) return false;
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


std::string name_of(uint32_t id) {
  Log& l = log();
  std::lock_guard<std::mutex> lock(l.mutex);
  TORCH_CHECK(id < l.names.size(), "unknown op name id ", id);
  return l.names[id];
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
