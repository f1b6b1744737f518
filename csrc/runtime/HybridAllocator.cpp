#include "runtime/HybridAllocator.h"

#include "runtime/HybridAccounting.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridGuard.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <cstring>

namespace hybrid {
namespace {

void delete_block(void* ctx) noexcept { free_block(static_cast<SlotBlock*>(ctx)); }

c10::DataPtr hybrid_data_ptr(SlotBlock* block) {
  return c10::DataPtr(block->data, block, &delete_block, c10::Device(c10::kPrivateUse1, block->slot));
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

SlotBlock* allocate_block(const SlotTablePtr& table, c10::DeviceIndex slot, size_t nbytes) {
  const SlotInfo& info = table->slot(slot);
  auto* block = new SlotBlock{table, slot, 0, nullptr, c10::DataPtr()};
  if (nbytes == 0) return block;  // like CUDA's allocator: nothing held, nothing counted
  SlotAccount& account = table->account(slot);
  try {
    account.charge(*table, slot, nbytes);
  } catch (...) {
    delete block;
    throw;
  }
  try {
    if (info.backing == Backing::Emulated) {
      block->data = c10::alloc_cpu(nbytes);
    } else {
      c10::DeviceGuard guard(c10::Device(c10::kCUDA, info.cuda_index));
      block->inner = c10::GetAllocator(c10::kCUDA)->allocate(nbytes);
      block->data = block->inner.get();
    }
  } catch (const c10::Error& e) {
    account.uncharge(nbytes);
    delete block;
    TORCH_CHECK_WITH(OutOfMemoryError, false, table->label(slot),
                     ": the memory behind the slot could not provide ",
                     format_bytes(static_cast<int64_t>(nbytes)), ": ", e.what_without_backtrace());
  }
  block->size = nbytes;
  return block;
}

void free_block(SlotBlock* block) noexcept {
  if (block->inner) {
    block->inner.clear();
  } else if (block->data != nullptr) {
    c10::free_cpu(block->data);
  }
  if (block->size > 0) block->table->account(block->slot).uncharge(block->size);
  delete block;  // may drop the last reference to a retired rack's table
}

c10::DataPtr allocate_on(const SlotTablePtr& table, c10::DeviceIndex slot, size_t nbytes) {
  return hybrid_data_ptr(allocate_block(table, slot, nbytes));
}

c10::DataPtr adopt(c10::DataPtr&& produced, size_t nbytes, const SlotTablePtr& table, c10::DeviceIndex slot) {
  if (produced.get_deleter() == &delete_block) {
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
  void* data = produced.get();
  auto* block = new SlotBlock{table, slot, nbytes, data, std::move(produced)};
  return hybrid_data_ptr(block);
}

const SlotTablePtr* owner_of(const c10::StorageImpl& storage) {
  const c10::DataPtr& ptr = storage.data_ptr();
  if (ptr.get_deleter() != &delete_block) return nullptr;
  return &static_cast<const SlotBlock*>(ptr.get_context())->table;
}

c10::DeviceAllocator* device_allocator() { return &g_device_allocator; }

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator)

} // namespace hybrid
