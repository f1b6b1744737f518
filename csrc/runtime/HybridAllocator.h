#pragma once
// Slot memory: allocations on a slot of a rack, each counted on that slot's
// account (HybridAccounting.h) and carrying its rack for as long as it lives.
// Emulated slots hold host memory; cuda-backed slots hold memory of the real
// GPU behind them, drawn from torch's CUDA caching allocator.
//
// A hybrid storage's DataPtr has SlotBlock as its context. The block holds a
// strong reference to its rack's SlotTable, so a retired rack's accounting
// lives exactly as long as its last allocation, and owner_of() tells which rack
// a storage belongs to without a lookup. The deleter never takes the GIL.

#include "runtime/HybridSlots.h"

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>

#include <cstddef>

namespace hybrid {

// One allocation on a slot. On an emulated slot the block sits in a header in
// front of the bytes it describes (one host allocation per block); elsewhere
// it is allocated on its own.
struct SlotBlock {
  SlotTablePtr table;      // the rack it was drawn from
  c10::DeviceIndex slot;
  bool in_header;          // lives in the header of its own host allocation
  size_t size;             // bytes counted on the slot's account (0: nothing counted)
  c10::DataPtr inner;      // owns the bytes when they came from elsewhere (CUDA, a kernel)

  // The bytes: right after the header, or what `inner` holds.
  void* data() const;
};

// Draws `nbytes` from `slot` of `table`, charging its account first: over
// capacity it throws c10::OutOfMemoryError and leaves every statistic as it
// was. A zero-byte block holds no memory and is not counted, but still knows
// its rack.
SlotBlock* allocate_block(const SlotTablePtr& table, c10::DeviceIndex slot, size_t nbytes);
// Frees the bytes, uncharges the account, drops the block's rack reference.
void free_block(SlotBlock* block) noexcept;

// A hybrid storage's DataPtr over a fresh allocation on `slot` of `table`.
c10::DataPtr allocate_on(const SlotTablePtr& table, c10::DeviceIndex slot, size_t nbytes);

// A hybrid DataPtr for bytes a kernel produced on `slot`'s behalf: memory the
// CPU routing drew from the slot (already counted) is handed over; memory from
// anywhere else (a CUDA kernel's output) is charged now, and freed with the
// error if it does not fit.
c10::DataPtr adopt(c10::DataPtr&& produced, size_t nbytes, const SlotTablePtr& table, c10::DeviceIndex slot);

// The deleter of every hybrid storage's DataPtr (its context is the SlotBlock).
void delete_slot_block(void* block) noexcept;

// The rack a storage's bytes belong to; nullptr when they are not slot memory.
// The pointer lives as long as the storage's bytes. Inline: the fallback asks
// this of every tensor argument.
inline const SlotTablePtr* owner_of(const c10::StorageImpl& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  if (ptr.get_deleter() != &delete_slot_block) return nullptr;
  return &static_cast<const SlotBlock*>(ptr.get_context())->table;
}

// The allocator registered for PrivateUse1: draws from the current slot of the
// current rack, like CUDA's allocator draws from the current device.
c10::DeviceAllocator* device_allocator();

} // namespace hybrid
