#pragma once
// The record side of the modelled timeline. The per-op dispatch hands each
// record to its rack's placer (model/HybridPlacer.h) when its cost is already
// known, or appends it to the log, which Python drains and prices
// (devices.cost) when a clock is read. Nothing here knows a chip's speed.

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Event.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hybrid::timeline {

enum class RecordKind : uint8_t {
  Op = 0,          // an ATen op executed on `slot`
  Copy = 1,        // bytes moved from `slot` to `peer` (-1: host memory)
  Marker = 2,      // an event recorded on (slot, stream); `value` is its id
  Wait = 3,        // (slot, stream) waits for marker `value`
  Kernel = 4,      // a compiled (Inductor) or Triton kernel launched on `slot`; `value`
                   // identifies the launch's description queued by interop.session
  Release = 5,     // marker `value` is not read again (its event was destroyed or recorded anew)
  // Collectives are placed by the Python collective layer directly (they are
  // costed from their schedule, not from a record).
};

enum RecordFlags : uint8_t {
  kCausal = 1,    // the op had is_causal=True (attention FLOPs halve)
  kMeasured = 2,  // measured_s holds a real CUDA-event time
  kAsync = 4,     // a copy: an asynchronous DMA (non_blocking with a pinned host end, or slot to slot)
  kSparse = 8,    // an op on sparse COO tensors: each is recorded as its indices and values
};

// Every record names the rack it happened on (its SlotTable's generation), so
// that a record of a retired rack (a tensor of it copied to the host) lands on
// that rack's timeline, never on the current one's.
struct Record {
  uint64_t rack;
  RecordKind kind;
  uint8_t flags;
  c10::ScalarType dtype;
  c10::DeviceIndex slot;
  c10::DeviceIndex peer;
  uint32_t name;             // index into names(); 0 for non-op records
  uint32_t shapes_begin;     // into the shape arena: per tensor [ndim, sizes...]
  uint32_t n_inputs;         // tensors before the outputs in the arena
  uint32_t n_outputs;
  c10::StreamId stream;
  c10::StreamId peer_stream;
  int64_t value;             // op: tensors in its first tensor list (0: none); copy: bytes;
                             // marker/wait: marker id
  double measured_s;
};

bool enabled() noexcept;
void set_enabled(bool on) noexcept;

// CUDA events bracketing an op on a cuda-backed slot; the time between them is
// read (with a synchronize) when the records are drained, not on the hot path.
struct Measurement {
  c10::Event start{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
  c10::Event end{c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT};
};

// Appends an op record. `inputs` are the op's arguments (tensors and tensor
// lists are read; everything else skipped), `outputs` its returns.
// `measured`, when given, is resolved into measured_s at drain time.
void record_op(const c10::OperatorHandle& op, uint64_t rack, c10::DeviceIndex slot,
               const c10::IValue* inputs, size_t n_inputs,
               const c10::IValue* outputs, size_t n_outputs,
               c10::ScalarType dtype, uint8_t flags,
               std::unique_ptr<Measurement> measured = nullptr);
// The same record for an op called unboxed (HybridUnboxed.cpp): its tensor arguments in order (undefined
// ones skipped, as the boxed overload skips None) and its one tensor result.
void record_op(const c10::OperatorHandle& op, uint64_t rack, c10::DeviceIndex slot,
               const at::Tensor* const* inputs, size_t n_inputs, const at::Tensor& output,
               c10::ScalarType dtype, std::unique_ptr<Measurement> measured = nullptr);
void record_copy(uint64_t rack, c10::DeviceIndex src, c10::DeviceIndex dst, int64_t nbytes,
                 c10::ScalarType dtype, bool asynchronous);
int64_t record_marker(uint64_t rack, c10::DeviceIndex slot, c10::StreamId stream);
void record_wait(uint64_t rack, c10::DeviceIndex slot, c10::StreamId stream, int64_t marker);
// Appends a release record: nothing will wait for or time marker `marker` again, so the
// timeline may forget it (an event's destructor, or its next record, calls this).
void record_release(uint64_t rack, int64_t marker) noexcept;
// Appends a kernel record on the slot's current stream, in order with the ops
// around it. Returns false (nothing appended) while recording is off.
bool record_kernel(uint64_t rack, c10::DeviceIndex slot, int64_t launch);

// Hands over everything recorded since the last drain.
struct Batch {
  std::vector<Record> records;
  std::vector<int64_t> shapes;
};
Batch drain();
std::string name_of(uint32_t id);
uint32_t intern_string(const std::string& s);

// Prices a record whose cost is not in the table (Python: interop.session), returning its cost id;
// `shapes` points at its first tensor's [ndim, sizes...] in the drained arena.
using Resolver = std::function<int32_t(const Record&, const int64_t* shapes)>;
// Places everything in the log, in order, on each record's rack's placer; the records no table holds
// a cost for go through `resolve` (called without any timeline lock held).
void place_pending(const Resolver& resolve);

// Python installs this: it places every pending record (interop.session.drain). The recording
// thread calls it, outside the log's lock, whenever `threshold` records are pending, so that a
// run that never reads a clock still has its records placed (and folded) in bounded batches.
void set_drain_hook(std::function<void()> hook, size_t threshold);
size_t pending() noexcept;

// Python installs this: modelled milliseconds between two markers.
void set_elapsed_hook(std::function<double(int64_t, int64_t)> hook);
double elapsed_ms(int64_t start_marker, int64_t end_marker);

} // namespace hybrid::timeline
