#pragma once
// Zero-copy execution: a hybrid tensor's bytes are ordinary host memory (or the
// memory of the real GPU behind the slot), so a kernel of the execution device
// can run on an alias of the same bytes. This file builds those aliases and maps
// the kernel's results back to hybrid tensors.

#include "runtime/HybridAllocator.h"
#include "runtime/HybridSlots.h"

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/macros/Macros.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <string_view>

namespace hybrid {

// Where a slot's kernels run: CPU for an emulated slot, cuda:N for a backed one.
inline c10::Device execution_device(const SlotTable& rack, c10::DeviceIndex slot) {
  const SlotInfo& info = rack.slot(slot);
  return info.backing == Backing::Emulated ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, info.cuda_index);
}
inline c10::DispatchKey execution_key(const SlotTable& rack, c10::DeviceIndex slot) {
  return rack.is_emulated(slot) ? c10::DispatchKey::CPU : c10::DispatchKey::CUDA;
}

// The error for a tensor whose bytes belong to a rack that is not `rack`: it
// names the tensor's rack and slot and says how to use it (re-enter its rack,
// or move it to the CPU first). `op` says what was asked of it.
[[noreturn]] C10_NOINLINE void raise_other_rack(c10::DeviceIndex slot, const SlotTable& owner,
                                                const SlotTable& rack, std::string_view op);

// Ensures a hybrid tensor's bytes belong to `rack` (a storage that is not slot
// memory belongs to no rack, and passes). One pointer compare on the hot path.
inline void check_rack(const at::Tensor& t, const SlotTable& rack, std::string_view op) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->has_storage()) return;
  const SlotTablePtr* owner = owner_of(*impl->unsafe_storage().unsafeGetStorageImpl());
  if (C10_UNLIKELY(owner != nullptr && owner->get() != &rack)) {
    raise_other_rack(t.device().index(), **owner, rack, op);
  }
}

// One op's worth of aliases. Tensors that share a hybrid storage share one alias
// storage, so views stay views of each other inside the kernel.
class AliasSet {
 public:
  // Aliases of tensors on `slot` of `rack`; `op` names the op in errors. The
  // rack must outlive the set (the op's entry point holds it).
  AliasSet(const SlotTablePtr& rack, c10::DeviceIndex slot, std::string_view op);

  // An execution-device tensor over `t`'s bytes, with its sizes, strides, offset
  // and conj/neg/zero bits. Refuses a tensor of another rack.
  // `written`: the op's schema marks the argument as mutated, so write_back_all
  // carries the kernel's metadata changes back to `t`.
  // `borrowed`: the caller keeps `t` alive until the set is gone (an unboxed
  // kernel's argument), so the set takes no reference of its own: a second
  // reference to a tensor Python holds costs the GIL (PyObject preservation).
  at::Tensor alias(const at::Tensor& t, bool written, bool borrowed = false);

  // A kernel result as a hybrid tensor: the original tensor when the kernel
  // returned one of our aliases (in-place and out= ops), a view of an input's
  // storage when it returned a view, else its new storage, relabelled as the
  // slot's (already counted when the routing allocator drew it, adopted and
  // counted now otherwise).
  at::Tensor to_hybrid(const at::Tensor& result);

  // After the kernel: carries what it did to each mutated argument's metadata
  // (resize, restride, set_) back to the hybrid tensor.
  void write_back_all();

  c10::DeviceIndex slot() const { return slot_; }

 private:
  struct StorageEntry {
    c10::StorageImpl* original;
    c10::Storage alias;
    const void* data_at_creation;
  };
  struct TensorEntry {
    at::Tensor alias;  // held so write_back_all can read it after the stack moved on
    c10::MaybeOwned<at::Tensor> original;
    bool written;
  };

  c10::Storage alias_storage(const c10::Storage& original);
  c10::Storage hybrid_storage_for(c10::StorageImpl* result_storage);
  void write_back(const TensorEntry& entry);

  const SlotTablePtr& rack_;
  c10::DeviceIndex slot_;
  std::string_view op_;
  c10::Device exec_;
  c10::DispatchKey exec_key_;
  c10::SmallVector<StorageEntry, 4> storages_;
  c10::SmallVector<TensorEntry, 4> tensors_;
};

// A sparse COO tensor on `device` over `indices` and `values` (tensors of that
// device), with the sizes and dims of `like`.
at::Tensor coo_over(const at::Tensor& like, const at::Tensor& indices, const at::Tensor& values,
                    c10::Device device, bool coalesced);

// A hybrid tensor over `storage` with the given geometry.
at::Tensor make_hybrid_tensor(c10::Storage storage, const at::Tensor& like_geometry);

// A tensor on emulated `slot` of the current rack over the bytes of `source` (a tensor on another emulated slot
// of that rack), with its geometry: the slot's account is charged the storage's whole size for as long as the
// tensor's storage lives, as for an allocation of its own, while the host holds the bytes once. What a
// data-parallel replica holds that is equal to another replica's by construction (its parameters and optimizer
// state, after an all-reduce of the gradients); writes through either tensor are seen by both.
at::Tensor shared_on_slot(const at::Tensor& source, c10::DeviceIndex slot);

} // namespace hybrid
