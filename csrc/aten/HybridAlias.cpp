#include "aten/HybridAlias.h"

#include "runtime/HybridAllocator.h"
#include "runtime/HybridSlots.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

namespace hybrid {
namespace {

// An alias's bytes keep their storage alive by a reference held in the DataPtr's context (no allocation).
void* keepalive(c10::StorageImpl* impl) {
  c10::raw::intrusive_ptr::incref(impl);
  return impl;
}
void release_keepalive(void* ctx) noexcept {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

void copy_geometry(c10::TensorImpl* dst, const c10::TensorImpl* src) {
  dst->set_sizes_and_strides(src->sizes(), src->strides(), src->storage_offset());
  if (src->is_conj()) dst->_set_conj(true);
  if (src->is_neg()) dst->_set_neg(true);
}

// The keys of a tensor on `backend` that stands for `src`. A zero tensor
// (autograd's _efficientzerotensor: sized, with no bytes behind it) must keep
// its key, or a kernel would read its sizes' worth through a null pointer;
// unlike conj and neg, that key can only be given at construction.
c10::DispatchKeySet keys_like(c10::DispatchKey backend, const c10::TensorImpl* src) {
  c10::DispatchKeySet keys(backend);
  if (src->_is_zerotensor()) keys = keys.add(c10::DispatchKey::ZeroTensor);
  return keys;
}

} // namespace

void raise_other_rack(c10::DeviceIndex slot, const SlotTable& owner, const SlotTable& rack,
                      std::string_view op) {
  TORCH_CHECK(false, "a tensor on ", owner.label(slot), " of rack ", owner.name(),
              " cannot be used while another rack is current (now ", rack.name(),
              "): it never runs on, nor is counted on, another rack's slots. Re-enter its rack to use it "
              "(`with rack:` or interop.set_rack(rack)), or move it to the CPU first (tensor.cpu()). (", op,
              ")");
}

AliasSet::AliasSet(const SlotTablePtr& rack, c10::DeviceIndex slot, std::string_view op)
    : rack_(rack),
      slot_(slot),
      op_(op),
      exec_(execution_device(*rack, slot)),
      exec_key_(execution_key(*rack, slot)) {}

c10::Storage AliasSet::alias_storage(const c10::Storage& original) {
  c10::StorageImpl* impl = original.unsafeGetStorageImpl();
  for (const StorageEntry& e : storages_) {
    if (e.original == impl) return e.alias;
  }
  // mutable_data materialises a lazily-cloned (COW) storage before a kernel
  // may write through the alias.
  void* data = impl->nbytes() ? impl->mutable_data() : impl->mutable_data_ptr().get();
  c10::DataPtr ptr(data, keepalive(impl), &release_keepalive, exec_);
  c10::Allocator* allocator =
      exec_.is_cpu() ? c10::GetCPUAllocator() : c10::GetAllocator(c10::kCUDA);
  c10::Storage alias(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), impl->sym_nbytes(), std::move(ptr), allocator,
      impl->resizable()));
  storages_.push_back(StorageEntry{impl, alias, data});
  return alias;
}

at::Tensor AliasSet::alias(const at::Tensor& t, bool written, bool borrowed) {
  check_rack(t, *rack_, op_);
  c10::TensorImpl* src = t.unsafeGetTensorImpl();
  // One tensor passed as two arguments stays one tensor: kernels test identity
  // (x.logical_and_(y) arrives as logical_and.out(x, y, out=x), and only an
  // output that is also an input may not be resized to the broadcast shape).
  for (TensorEntry& e : tensors_) {
    if (e.original->unsafeGetTensorImpl() == src) {
      e.written = e.written || written;
      return e.alias;
    }
  }
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      alias_storage(src->storage()), keys_like(exec_key_, src), src->dtype());
  copy_geometry(impl.get(), src);
  at::Tensor alias(std::move(impl));
  tensors_.push_back(TensorEntry{alias, borrowed ? c10::MaybeOwned<at::Tensor>::borrowed(t)
                                                 : c10::MaybeOwned<at::Tensor>::owned(std::in_place, t),
                                 written});
  return alias;
}

c10::Storage AliasSet::hybrid_storage_for(c10::StorageImpl* result) {
  for (const StorageEntry& e : storages_) {
    if (e.alias.unsafeGetStorageImpl() == result) {
      return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(e.original));
    }
  }
  const c10::Device label(c10::kPrivateUse1, slot_);
  if (result->device() != label) {
    // A new storage the kernel made. Relabelled in place: nothing but the
    // kernel's own (dying) tensors refer to it.
    c10::DataPtr old = result->set_data_ptr(c10::DataPtr(nullptr, label));
    result->set_data_ptr_noswap(adopt(std::move(old), result->nbytes(), rack_, slot_));
    result->set_allocator(device_allocator());
  }
  return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(result));
}

at::Tensor AliasSet::to_hybrid(const at::Tensor& result) {
  if (!result.defined()) return result;
  c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  for (const TensorEntry& e : tensors_) {
    if (e.alias.unsafeGetTensorImpl() == impl) return *e.original;
  }
  if (result.layout() == c10::kSparse && result.device() == exec_) {
    const auto* coo = at::sparse::get_sparse_impl(result);
    return coo_over(result, to_hybrid(coo->indices()), to_hybrid(coo->values()),
                    c10::Device(c10::DeviceType::PrivateUse1, slot_), coo->coalesced());
  }
  TORCH_CHECK_NOT_IMPLEMENTED(
      result.device() != exec_ || result.layout() == c10::kStrided, op_, ": a ", result.layout(),
      " tensor cannot be on hybrid:", static_cast<int>(slot_), ": slots hold strided and sparse COO tensors. "
      "Instead: keep it on the CPU (t.cpu()), or use the COO tensor on the slot");
  if (result.device() != exec_ || !impl->has_storage()) {
    // Not the slot's (a CPU scalar passed through, a host-side result of a
    // CUDA kernel): it keeps its device, as it would under CUDA.
    return result;
  }
  return make_hybrid_tensor(hybrid_storage_for(impl->storage().unsafeGetStorageImpl()), result);
}

void AliasSet::write_back_all() {
  for (const TensorEntry& e : tensors_) {
    if (e.written) write_back(e);
  }
}

void AliasSet::write_back(const TensorEntry& e) {
  c10::TensorImpl* dst = e.original->unsafeGetTensorImpl();
  const c10::TensorImpl* src = e.alias.unsafeGetTensorImpl();
  c10::StorageImpl* alias_storage = src->storage().unsafeGetStorageImpl();
  c10::StorageImpl* own = dst->storage().unsafeGetStorageImpl();

  const StorageEntry* entry = nullptr;
  for (const StorageEntry& s : storages_) {
    if (s.original == own) entry = &s;
  }
  TORCH_INTERNAL_ASSERT(entry != nullptr, "write_back on a tensor that was never aliased");

  if (entry->alias.unsafeGetStorageImpl() != alias_storage) {
    // set_() pointed the alias at another storage.
    dst->set_storage_keep_dtype(hybrid_storage_for(alias_storage));
  } else if (alias_storage->data() != entry->data_at_creation) {
    // The kernel resized the storage: the new bytes (drawn from the slot)
    // become the hybrid storage's.
    c10::DataPtr moved = alias_storage->set_data_ptr(c10::DataPtr(nullptr, exec_));
    own->set_data_ptr_noswap(adopt(std::move(moved), alias_storage->nbytes(), rack_, slot_));
    own->set_nbytes(alias_storage->nbytes());
  }
  if (dst->sizes() != src->sizes() || dst->strides() != src->strides() ||
      dst->storage_offset() != src->storage_offset()) {
    dst->set_sizes_and_strides(src->sizes(), src->strides(), src->storage_offset());
  }
}

at::Tensor coo_over(const at::Tensor& like, const at::Tensor& indices, const at::Tensor& values,
                    c10::Device device, bool coalesced) {
  c10::DeviceGuard guard(device);  // the impl's empty indices and values are made on the current device first
  return at::native::new_with_dims_and_tensor_sparse_symint(
      like.sparse_dim(), like.dense_dim(), like.sym_sizes(), indices, values, values.scalar_type(),
      c10::kSparse, device, std::nullopt, coalesced);
}

at::Tensor make_hybrid_tensor(c10::Storage storage, const at::Tensor& like) {
  const c10::TensorImpl* src = like.unsafeGetTensorImpl();
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), keys_like(c10::DispatchKey::PrivateUse1, src), src->dtype());
  copy_geometry(impl.get(), src);
  return at::Tensor(std::move(impl));
}

} // namespace hybrid

namespace hybrid {

at::Tensor shared_on_slot(const at::Tensor& source, c10::DeviceIndex slot) {
  const SlotTablePtr& table = current_table();
  TORCH_CHECK(source.device().type() == c10::kPrivateUse1 && source.unsafeGetTensorImpl()->has_storage(),
              "shared_on_slot: source must be a tensor on a slot, got one on ", source.device());
  c10::StorageImpl* impl = source.storage().unsafeGetStorageImpl();
  const SlotTablePtr* owner = owner_of(*impl);
  TORCH_CHECK(owner != nullptr && owner->get() == table.get(),
              "shared_on_slot: source's bytes must belong to the current rack's slots");
  TORCH_CHECK(slot >= 0 && slot < table->size(), "shared_on_slot: slot ", static_cast<int>(slot),
              " is not on the current rack (", static_cast<int>(table->size()), " slots)");
  // A cuda-backed slot's bytes live on its own GPU: another slot cannot point at them.
  TORCH_CHECK(table->is_emulated(slot) && table->is_emulated(source.device().index()),
              "shared_on_slot: both slots must be emulated (hybrid:", static_cast<int>(source.device().index()),
              " -> hybrid:", static_cast<int>(slot), ")");
  void* data = impl->nbytes() ? impl->mutable_data() : impl->mutable_data_ptr().get();
  // The block keeps the source's storage alive; adopt() charges the slot's account the whole size.
  c10::DataPtr keep(data, keepalive(impl), &release_keepalive, c10::Device(c10::kCPU));
  c10::DataPtr ptr = adopt(std::move(keep), impl->nbytes(), table, slot);
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), impl->nbytes(),
                                                             std::move(ptr), device_allocator(), false));
  return make_hybrid_tensor(std::move(storage), source);
}

} // namespace hybrid
