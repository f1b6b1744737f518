#pragma once
// Device guard for `hybrid`: the current slot and, per slot, the current stream
// are thread-local, as CUDA's are. Emulated streams execute in order on the
// host; what distinguishes them is where their work lands on the modelled
// timeline.

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace hybrid {

c10::DeviceIndex current_slot() noexcept;
void set_current_slot(c10::DeviceIndex index);  // validates
// The slot of every thread that has not chosen one (CUDA's device 0); validates.
c10::DeviceIndex default_slot() noexcept;
void set_default_slot(c10::DeviceIndex index);

c10::StreamId current_stream_id(c10::DeviceIndex index) noexcept;
c10::Stream current_stream(c10::DeviceIndex index);
c10::Stream new_stream(c10::DeviceIndex index);

struct HybridGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override { return static_type; }
  c10::Device exchangeDevice(c10::Device d) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device d) const override;
  void uncheckedSetDevice(c10::Device d) const noexcept override;
  c10::Stream getStream(c10::Device d) const override;
  c10::Stream getDefaultStream(c10::Device d) const override;
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority = false) const override;
  c10::Stream exchangeStream(c10::Stream s) const override;
  c10::DeviceIndex deviceCount() const noexcept override;

  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeEvent(void* event) const override;
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;
  double elapsedTime(void* event1, void* event2, const c10::DeviceIndex device_index) const override;
};

} // namespace hybrid
