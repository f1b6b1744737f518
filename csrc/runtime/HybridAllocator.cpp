#include "runtime/HybridAllocator.h"

#include "runtime/HybridAccounting.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridGuard.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <new>

namespace hybrid {
namespace {

// Bytes in front of an emulated allocation that hold its SlotBlock: a multiple
// of alloc_cpu's 64-byte alignment, so the data keeps that alignment.
constexpr size_t kBlockHeader = 64;
static_assert(sizeof(SlotBlock) <= kBlockHeader && kBlockHeader % 64 == 0);

c10::DataPtr hybrid_data_ptr(SlotBlock* block) {
  return c10::DataPtr(block->data(), block, &delete_slot_block, c10::Device(c10::kPrivateUse1, block->slot));
}

class HybridDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const SlotTablePtr& table = current_table();
    return allocate_on(table, current_slot(), nbytes);
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count == 0) return;
    const c10::DeviceIndex slot = current_slot();
    const SlotTablePtr& table = current_table();
    if (slot < table->size() && !table->is_emulated(slot)) {
      c10::GetAllocator(c10::kCUDA)->copy_data(dest, src, count);
    } else {
      std::memcpy(dest, src, count);
    }
  }

  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    // Nothing is cached: freed bytes go straight back (reserved == allocated).
  }
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {
    // Emulated streams execute in order on the host; nothing to defer.
  }

  // torch.accelerator asks about the current rack, as torch.cuda asks about
  // this process's devices; a retired rack answers through its interop.Rack.
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    return current_table()->account(device).stats();
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    current_table()->account(device).reset_accumulated();
  }
  void resetPeakStats(c10::DeviceIndex device) override { current_table()->account(device).reset_peak(); }
};

HybridDeviceAllocator g_device_allocator;

} // namespace

void* SlotBlock::data() const {
  return in_header ? reinterpret_cast<char*>(const_cast<SlotBlock*>(this)) + kBlockHeader : inner.get();
}

SlotBlock* allocate_block(const SlotTablePtr& table, c10::DeviceIndex slot, size_t nbytes) {
  const SlotInfo& info = table->slot(slot);
  if (nbytes == 0) {
    // Like CUDA's allocator: nothing held, nothing counted; the block still
    // tells which rack the (empty) storage belongs to.
    return new SlotBlock{table, slot, false, 0, c10::DataPtr()};
  }
  SlotAccount& account = table->account(slot);
  account.charge(*table, slot, nbytes);
  try {
    if (info.backing == Backing::Emulated) {
      // The header keeps the bytes at alloc_cpu's alignment.
      void* base = c10::alloc_cpu(kBlockHeader + nbytes);
      return new (base) SlotBlock{table, slot, true, nbytes, c10::DataPtr()};
    }
    c10::DeviceGuard guard(c10::Device(c10::kCUDA, info.cuda_index));
    return new SlotBlock{table, slot, false, nbytes, c10::GetAllocator(c10::kCUDA)->allocate(nbytes)};
  } catch (const c10::Error& e) {
    account.uncharge(nbytes);
    TORCH_CHECK_WITH(OutOfMemoryError, false, table->label(slot),
                     ": the memory behind the slot could not provide ",
                     format_bytes(static_cast<int64_t>(nbytes)), ": ", e.what_without_backtrace());
  }
}

void free_block(SlotBlock* block) noexcept {
  block->inner.clear();
  if (block->size > 0) block->table->account(block->slot).uncharge(block->size);
  // Either may drop the last reference to a retired rack's table.
  if (block->in_header) {
    block->~SlotBlock();
    c10::free_cpu(block);
  } else {
    delete block;
  }
}

void delete_slot_block(void* block) noexcept { free_block(static_cast<SlotBlock*>(block)); }

c10::DataPtr allocate_on(const SlotTablePtr& table, c10::DeviceIndex slot, size_t nbytes) {
  return hybrid_data_ptr(allocate_block(table, slot, nbytes));
}

c10::DataPtr adopt(c10::DataPtr&& produced, size_t nbytes, const SlotTablePtr& table, c10::DeviceIndex slot) {
  if (produced.get_deleter() == &delete_slot_block) {
    produced.unsafe_set_device(c10::Device(c10::kPrivateUse1, slot));
    return std::move(produced);
  }
  if (SlotBlock* routed = take_routed(produced)) {
    TORCH_INTERNAL_ASSERT(routed->table == table && routed->slot == slot,
                          "hybrid allocator: a kernel's output was drawn from another slot");
    return hybrid_data_ptr(routed);
  }
  // Charged before we take ownership: on error `produced` frees itself.
  if (nbytes > 0) table->account(slot).charge(*table, slot, nbytes);
  auto* block = new SlotBlock{table, slot, false, nbytes, std::move(produced)};
  return hybrid_data_ptr(block);
}

c10::DeviceAllocator* device_allocator() { return &g_device_allocator; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)

} // namespace hybrid
