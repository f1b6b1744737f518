// The accelerator hooks torch consults for PrivateUse1: availability, device
// count, current device and generators (torch.accelerator, torch.Generator).

#include "aten/native/Memory.h"
#include "runtime/HybridGenerator.h"
#include "runtime/HybridGuard.h"
#include "runtime/HybridHostAllocator.h"
#include "runtime/HybridSlots.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

namespace hybrid {
namespace {

struct HybridHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return slot_count() > 0; }
  void init() const override {}

  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_slot() : index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(index < 0 ? current_slot() : index);
  }

  at::Device getDeviceFromPtr(void* /*data*/) const override {
    // Emulated memory is indistinguishable from host memory by address.
    return at::Device(c10::kPrivateUse1, current_slot());
  }

  bool isPinnedPtr(const void* data) const override { return pinned::contains(data); }

  at::Allocator* getPinnedMemoryAllocator() const override { return pinned::allocator(); }

  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    return index >= 0 && index < slot_count();
  }

  c10::DeviceIndex deviceCount() const override { return slot_count(); }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_slot(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_slot(); }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_slot();
    if (index >= 0 && index != old) set_current_slot(index);  // as the device guard's exchange
    return old;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }

  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

void HybridHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  native::resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
}

} // namespace

void register_hooks() {
  static HybridHooks hooks;
  static bool registered = false;
  if (!registered) {
    at::RegisterPrivateUse1HooksInterface(&hooks);
    registered = true;
  }
}

} // namespace hybrid
