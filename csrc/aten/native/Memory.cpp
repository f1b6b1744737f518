#include "aten/native/Memory.h"

#include "aten/HybridAlias.h"
#include "runtime/HybridAllocator.h"
#include "runtime/HybridGuard.h"
#include "runtime/HybridSlots.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <cstring>

namespace hybrid::native {
namespace {

c10::DeviceIndex requested_slot(std::optional<c10::Device> device) {
  return device.has_value() && device->has_index() ? device->index() : current_slot();
}

// A zero-byte tensor on an index the current rack does not have holds nothing
// and belongs to no rack. torch copies a storage to the host (torch.save,
// UntypedStorage.cpu()) through an empty tensor made on the storage's device
// index and set_ to the storage, so a tensor of a retired rack with more slots
// than the current one needs these to be saved. Anything run on one still
// fails, naming the index.
bool rackless(c10::DeviceIndex slot, size_t nbytes) {
  return nbytes == 0 && slot >= 0 && slot < kMaxSlots && slot >= current_table()->size();
}

// Hands out the no-bytes DataPtr of a rackless tensor (used only while one is made).
struct NoBytes final : c10::Allocator {
  explicit NoBytes(c10::DeviceIndex slot) : slot(slot) {}
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_INTERNAL_ASSERT(nbytes == 0);
    return c10::DataPtr(nullptr, c10::Device(c10::kPrivateUse1, slot));
  }
  void copy_data(void*, const void*, std::size_t) const override {}
  c10::DeviceIndex slot;
};

at::Tensor with_device_allocator(at::Tensor t) {
  t.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl()->set_allocator(device_allocator());
  return t;
}

void check_dense(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "hybrid supports strided tensors only, got layout ", *layout);
  TORCH_CHECK(!pin_memory.value_or(false), "Only dense CPU tensors can be pinned");
}

constexpr auto kHybridKeys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);

// Memory nobody wrote holds whatever the host held before. Under
// torch.use_deterministic_algorithms(True) with
// torch.utils.deterministic.fill_uninitialized_memory (on by default), torch
// fills it on the CPU and CUDA (NaN for floating and complex, the largest value
// for integers) so that reading it shows; a slot does the same, with torch's
// own fill, run on the slot as any op.
bool fill_uninitialized() {
  const at::Context& context = at::globalContext();
  return C10_UNLIKELY(context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory());
}

at::Tensor filled_if_asked(at::Tensor t) {
  if (fill_uninitialized() && t.numel() > 0) at::native::fill_empty_deterministic_(t);
  return t;
}

// The bytes a resize added to `self`'s storage, past `old_nbytes`, filled as torch's
// fill_resize_deterministic_ fills them, over a view made without an empty tensor's
// own fill.
void fill_grown(const at::Tensor& self, size_t old_nbytes) {
  const auto itemsize = static_cast<int64_t>(self.itemsize());
  const int64_t old_numel = static_cast<int64_t>(old_nbytes) / itemsize;
  const int64_t new_numel = static_cast<int64_t>(self.storage().nbytes()) / itemsize;
  if (new_numel <= old_numel) return;
  at::Tensor grown = at::empty({0}, self.options());
  grown.set_(self.storage(), old_numel, {new_numel - old_numel}, {1});
  at::native::fill_empty_deterministic_(grown);
}

// Grows `self`'s storage to cover its current geometry.
void cover_geometry(const at::Tensor& self) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (impl->numel() == 0) return;
  const size_t needed = at::detail::computeStorageNbytes(
      impl->sizes(), impl->strides(), impl->dtype().itemsize(),
      static_cast<size_t>(impl->storage_offset()));
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resize_storage_bytes(storage, needed);
}

// Puts a tensor's storage and geometry back unless committed. The kernels
// below change the geometry first and grow the storage to cover it second;
// when growing fails (out of memory on the slot) the tensor must be exactly
// as it was, not a larger shape over the old bytes.
class GeometryRollback {
 public:
  explicit GeometryRollback(c10::TensorImpl* impl)
      : impl_(impl),
        storage_(impl->storage()),
        sizes_(impl->sizes().begin(), impl->sizes().end()),
        strides_(impl->strides().begin(), impl->strides().end()),
        offset_(impl->storage_offset()) {}
  GeometryRollback(const GeometryRollback&) = delete;
  GeometryRollback& operator=(const GeometryRollback&) = delete;

  ~GeometryRollback() {
    if (impl_ == nullptr) return;
    if (impl_->storage().unsafeGetStorageImpl() != storage_.unsafeGetStorageImpl()) {
      impl_->set_storage_keep_dtype(storage_);
    }
    impl_->set_sizes_and_strides(sizes_, strides_, offset_);
  }

  void commit() { impl_ = nullptr; }

 private:
  c10::TensorImpl* impl_;
  c10::Storage storage_;
  c10::SmallVector<int64_t, 5> sizes_;
  c10::SmallVector<int64_t, 5> strides_;
  int64_t offset_;
};

} // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_dense(layout, pin_memory);
  const c10::DeviceIndex slot = requested_slot(device);
  const auto scalar_type = c10::dtype_or_default(dtype);
  if (rackless(slot, c10::multiply_integers(size) * c10::elementSize(scalar_type))) {
    NoBytes none(slot);
    return with_device_allocator(at::detail::empty_generic(size, &none, kHybridKeys, scalar_type, memory_format));
  }
  const c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, slot));
  return filled_if_asked(
      at::detail::empty_generic(size, device_allocator(), kHybridKeys, scalar_type, memory_format));
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_dense(layout, pin_memory);
  const c10::DeviceIndex slot = requested_slot(device);
  const auto scalar_type = c10::dtype_or_default(dtype);
  if (rackless(slot, at::detail::computeStorageNbytes(size, stride, c10::elementSize(scalar_type)))) {
    NoBytes none(slot);
    return with_device_allocator(at::detail::empty_strided_generic(size, stride, &none, kHybridKeys, scalar_type));
  }
  const c10::DeviceGuard guard(c10::Device(c10::kPrivateUse1, slot));
  return filled_if_asked(
      at::detail::empty_strided_generic(size, stride, device_allocator(), kHybridKeys, scalar_type));
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceIndex slot = storage->device().index();
  const SlotTablePtr& rack = current_table();
  if (const SlotTablePtr* owner = owner_of(*storage); owner != nullptr && owner->get() != rack.get()) {
    raise_other_rack(slot, **owner, *rack, "resize");
  }
  c10::DataPtr fresh = allocate_on(rack, slot, nbytes);
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0) {
    if (rack->is_emulated(slot)) {
      std::memcpy(fresh.get(), storage->data(), keep);
    } else {
      const auto options = at::TensorOptions()
                               .dtype(at::kByte)
                               .device(c10::Device(c10::kCUDA, rack->slot(slot).cuda_index));
      at::from_blob(fresh.get(), {static_cast<int64_t>(keep)}, options)
          .copy_(at::from_blob(const_cast<void*>(storage->data()),
                               {static_cast<int64_t>(keep)}, options));
    }
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  check_rack(self, *current_table(), "aten::resize_");
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  const size_t old_nbytes = impl->storage().nbytes();
  GeometryRollback rollback(impl);
  if (impl->sizes() != size || memory_format.has_value()) {
    impl->set_sizes_contiguous(size);
    const auto format = memory_format.value_or(c10::MemoryFormat::Contiguous);
    if (format != c10::MemoryFormat::Preserve) impl->empty_tensor_restride(format);
  }
  cover_geometry(self);
  rollback.commit();
  if (fill_uninitialized()) fill_grown(self, old_nbytes);
  return self;
}

at::Tensor& set_storage_offset_(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                                c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.storage().device(),
              "Attempted to set the storage of a tensor on device \"", self.storage().device(),
              "\" to a storage on different device \"", source.device(),
              "\".  This is no longer allowed; the devices must match.");
  TORCH_CHECK(storage_offset >= 0, "Tensor: invalid storage offset ", storage_offset);
  // Like a view, set_ only points the tensor at bytes: it computes nothing and
  // counts nothing, so it takes a storage of any rack (the tensor then belongs
  // to that rack). Growing the storage to cover the geometry is a resize, which
  // the storage's own rack must be current for.
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  GeometryRollback rollback(impl);
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(size, stride, storage_offset);
  cover_geometry(self);
  rollback.commit();
  return self;
}

at::Tensor& set_storage_(at::Tensor& self, c10::Storage source) {
  const int64_t itemsize = static_cast<int64_t>(self.dtype().itemsize());
  TORCH_CHECK(source.nbytes() % itemsize == 0, "Expected storage of size ", source.nbytes(),
              " bytes to be divisible by the element size ", itemsize);
  const int64_t numel = static_cast<int64_t>(source.nbytes()) / itemsize;
  return set_storage_offset_(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  TORCH_CHECK(self.dtype() == source.dtype(), "Could not set tensor of type ", source.dtype(),
              " to a tensor of type ", self.dtype());
  return set_storage_offset_(self, source.storage(), source.storage_offset(), source.sizes(),
                             source.strides());
}

at::Tensor& set_empty_(at::Tensor& self) {
  const c10::DeviceIndex slot = self.device().index();
  const SlotTablePtr& rack = current_table();
  c10::Storage empty(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), 0,
      rackless(slot, 0) ? NoBytes(slot).allocate(0) : allocate_on(rack, slot, 0), device_allocator(), true));
  self.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(empty));
  self.unsafeGetTensorImpl()->set_sizes_contiguous({0});
  return self;
}

} // namespace hybrid::native
