#include "runtime/HybridGuard.h"

#include "runtime/HybridSlots.h"
#include "model/HybridTimeline.h"

#include <c10/util/Exception.h>

#include <array>
#include <atomic>

namespace hybrid {
namespace {

// -1 until the thread chooses a slot: it is then on the process's default slot,
// as a CUDA thread that never called cudaSetDevice is on device 0. That is
// slot 0, or under the CUDA layer the slot cuda:0 maps to (set_default_slot),
// read when asked: a thread started before the layer is installed follows it
// until it changes slots (a device guard restoring its slot then pins it).
thread_local c10::DeviceIndex t_current_slot = -1;
std::atomic<c10::DeviceIndex> g_default_slot{0};
// Stream 0 is every slot's default stream; others are handed out by new_stream.
thread_local std::array<c10::StreamId, kMaxSlots> t_current_stream{};
std::atomic<c10::StreamId> g_next_stream{1};

c10::DeviceIndex resolve(c10::Device d) {
  TORCH_INTERNAL_ASSERT(d.type() == c10::DeviceType::PrivateUse1);
  return d.has_index() ? d.index() : current_slot();
}

// An event is a marker on the modelled timeline: its time is the modelled
// clock of its stream when it was recorded. On a cuda-backed slot it also holds
// a real CUDA event, whose measured time elapsed_time reports instead.
struct Event {
  uint64_t rack = 0;  // the generation of the rack whose timeline holds `marker`
  c10::DeviceIndex slot = -1;
  c10::StreamId stream = 0;
  int64_t marker = -1;
  void* cuda_event = nullptr;
  c10::DeviceIndex cuda_index = -1;
};

const c10::impl::DeviceGuardImplInterface* cuda_impl() {
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

} // namespace

c10::DeviceIndex current_slot() noexcept {
  const c10::DeviceIndex chosen = t_current_slot;
  return chosen >= 0 ? chosen : g_default_slot.load(std::memory_order_relaxed);
}

c10::DeviceIndex default_slot() noexcept { return g_default_slot.load(std::memory_order_relaxed); }

void set_default_slot(c10::DeviceIndex index) {
  (void)slot_info(index);
  g_default_slot.store(index, std::memory_order_relaxed);
}

void set_current_slot(c10::DeviceIndex index) {
  (void)slot_info(index);
  t_current_slot = index;
}

c10::StreamId current_stream_id(c10::DeviceIndex index) noexcept {
  return (index >= 0 && index < kMaxSlots) ? t_current_stream[index] : 0;
}

c10::Stream current_stream(c10::DeviceIndex index) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::kPrivateUse1, index),
                     current_stream_id(index));
}

c10::Stream new_stream(c10::DeviceIndex index) {
  (void)slot_info(index);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::kPrivateUse1, index),
                     g_next_stream.fetch_add(1));
}

c10::Device HybridGuardImpl::exchangeDevice(c10::Device d) const {
  const c10::Device old = getDevice();
  const c10::DeviceIndex index = resolve(d);
  // A switch to the slot already current (a device guard's on every op) leaves a
  // thread still on the default unpinned.
  if (index != current_slot()) set_current_slot(index);
  return old;
}

c10::Device HybridGuardImpl::getDevice() const {
  return c10::Device(c10::kPrivateUse1, current_slot());
}

void HybridGuardImpl::setDevice(c10::Device d) const { set_current_slot(resolve(d)); }

void HybridGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
  const c10::DeviceIndex index = resolve(d);
  if (index != current_slot()) t_current_slot = index;
}

c10::Stream HybridGuardImpl::getStream(c10::Device d) const {
  return current_stream(resolve(d));
}

c10::Stream HybridGuardImpl::getDefaultStream(c10::Device d) const {
  return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kPrivateUse1, resolve(d)));
}

c10::Stream HybridGuardImpl::getNewStream(c10::Device d, int /*priority*/) const {
  return new_stream(resolve(d));
}

c10::Stream HybridGuardImpl::getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const {
  return new_stream(resolve(d));
}

c10::Stream HybridGuardImpl::exchangeStream(c10::Stream s) const {
  const c10::DeviceIndex index = s.device_index();
  (void)slot_info(index);
  const c10::Stream old = current_stream(index);
  t_current_stream[index] = s.id();
  return old;
}

c10::DeviceIndex HybridGuardImpl::deviceCount() const noexcept {
  // Every index a rack can ever use, not the current rack's size: the autograd
  // engine sizes its per-device queues from this once, at its first backward,
  // and a larger rack installed later would otherwise index past them. The
  // rack's own size is what torch.hybrid.device_count() and torch.accelerator
  // report (through the Python device module and the hooks).
  return kMaxSlots;
}

void HybridGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  auto* e = static_cast<Event*>(event);
  if (e == nullptr) return;
  if (e->cuda_event != nullptr) cuda_impl()->destroyEvent(e->cuda_event, e->cuda_index);
  timeline::record_release(e->rack, e->marker);  // nothing can time or wait for it any more
  delete e;
}

void HybridGuardImpl::record(void** event, const c10::Stream& stream,
                             const c10::DeviceIndex device_index,
                             const c10::EventFlag /*flag*/) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "event device index ", static_cast<int>(device_index),
              " does not match the recording stream's device ", stream.device());
  if (*event == nullptr) *event = new Event();
  auto* e = static_cast<Event*>(*event);
  e->slot = stream.device_index();
  e->stream = stream.id();
  const SlotTablePtr& rack = current_table();
  const SlotInfo& info = rack->slot(e->slot);
  timeline::record_release(e->rack, e->marker);  // recorded anew: its previous marker is not read again
  e->rack = rack->generation();
  e->marker = timeline::record_marker(e->rack, e->slot, e->stream);
  if (info.backing == Backing::Cuda) {
    // Timing-enabled (BACKEND_DEFAULT) so elapsed_time can measure.
    const c10::Device device(c10::DeviceType::CUDA, info.cuda_index);
    e->cuda_index = info.cuda_index;
    cuda_impl()->record(&e->cuda_event, cuda_impl()->getStream(device), info.cuda_index,
                        c10::EventFlag::BACKEND_DEFAULT);
  }
}

void HybridGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (event == nullptr) return;  // never recorded: nothing to wait for, as in CUDA
  auto* e = static_cast<Event*>(event);
  timeline::record_wait(current_table()->generation(), stream.device_index(), stream.id(), e->marker);
}

bool HybridGuardImpl::queryEvent(void* event) const {
  auto* e = static_cast<Event*>(event);
  if (e != nullptr && e->cuda_event != nullptr) return cuda_impl()->queryEvent(e->cuda_event);
  return true;  // host execution is synchronous: recorded work is complete
}

bool HybridGuardImpl::queryStream(const c10::Stream&) const { return true; }
void HybridGuardImpl::synchronizeStream(const c10::Stream&) const {}
void HybridGuardImpl::synchronizeEvent(void* event) const {
  auto* e = static_cast<Event*>(event);
  if (e != nullptr && e->cuda_event != nullptr) cuda_impl()->synchronizeEvent(e->cuda_event);
}

void HybridGuardImpl::synchronizeDevice(const c10::DeviceIndex index) const {
  const SlotInfo& info = slot_info(index);
  if (info.backing == Backing::Cuda) cuda_impl()->synchronizeDevice(info.cuda_index);
}

double HybridGuardImpl::elapsedTime(void* event1, void* event2, const c10::DeviceIndex) const {
  TORCH_CHECK(event1 && event2,
              "both events must be recorded before elapsed_time can be computed");
  auto* a = static_cast<Event*>(event1);
  auto* b = static_cast<Event*>(event2);
  if (a->cuda_event != nullptr && b->cuda_event != nullptr) {
    return cuda_impl()->elapsedTime(a->cuda_event, b->cuda_event, a->cuda_index);  // measured
  }
  return timeline::elapsed_ms(a->marker, b->marker);  // modelled
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, HybridGuardImpl);

} // namespace hybrid
