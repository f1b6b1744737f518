#include "aten/native/Copy.h"

#include "aten/HybridAlias.h"
#include "runtime/HybridAllocator.h"
#include "runtime/HybridHostAllocator.h"
#include "runtime/HybridSlots.h"
#include "runtime/HybridTimeline.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/DeviceGuard.h>

#include <optional>

namespace hybrid::native {
namespace {

c10::DeviceIndex slot_or_host(const at::Tensor& t) {
  return t.is_privateuseone() ? t.device().index() : static_cast<c10::DeviceIndex>(-1);
}

} // namespace

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const c10::DeviceIndex src_slot = slot_or_host(self);
  const c10::DeviceIndex dst_slot = slot_or_host(dst);
  // Aliases are per slot: the two ends may live on different slots (or one on
  // the host), and each end runs where its bytes are.
  std::optional<AliasSet> src_aliases, dst_aliases;
  at::Tensor src_exec = self;
  at::Tensor dst_exec = dst;
  if (src_slot >= 0) src_exec = src_aliases.emplace(src_slot).alias(self, false);
  if (dst_slot >= 0) dst_exec = dst_aliases.emplace(dst_slot).alias(dst, true);
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // Conversion temporaries count against the destination, where they would live.
    RouteCpuAllocations route(dst_slot >= 0 && is_emulated(dst_slot)
                                  ? dst_slot
                                  : static_cast<c10::DeviceIndex>(-1));
    std::optional<c10::DeviceGuard> cuda_guard;
    if (dst_exec.is_cuda()) {
      cuda_guard.emplace(dst_exec.device());
    } else if (src_exec.is_cuda()) {
      cuda_guard.emplace(src_exec.device());
    }
    dst_exec.copy_(src_exec, non_blocking);
  }
  if (timeline::enabled()) {
    // A host end must be pinned for the copy to be an asynchronous DMA.
    const at::Tensor& host = src_slot < 0 ? self : dst;
    const bool async = non_blocking &&
        ((src_slot >= 0 && dst_slot >= 0) || pinned::contains(host.storage().data()));
    timeline::record_copy(src_slot, dst_slot,
                          static_cast<int64_t>(self.numel()) *
                              static_cast<int64_t>(self.element_size()),
                          self.scalar_type(), async);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

} // namespace hybrid::native
