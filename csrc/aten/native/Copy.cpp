#include "aten/native/Copy.h"

#include "aten/HybridAlias.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridHostAllocator.h"
#include "runtime/HybridSlots.h"
#include "model/HybridTimeline.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/DeviceGuard.h>

#include <optional>

namespace hybrid::native {
namespace {

constexpr std::string_view kOp = "aten::copy_";

c10::DeviceIndex slot_or_host(const at::Tensor& t) {
  return t.is_privateuseone() ? t.device().index() : static_cast<c10::DeviceIndex>(-1);
}

} // namespace

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const c10::DeviceIndex src_slot = slot_or_host(self);
  const c10::DeviceIndex dst_slot = slot_or_host(dst);
  const SlotTablePtr& current = current_table();
  // A tensor of a retired rack may still go to the host (.cpu(), printing,
  // torch.save): its bytes are read where they are, on its own rack's slot,
  // and the copy lands on its own rack's timeline. Any other copy involves
  // the current rack only.
  const SlotTablePtr* src_rack = &current;
  if (src_slot >= 0 && dst_slot < 0) {
    if (const SlotTablePtr* owner = owner_of(*self.storage().unsafeGetStorageImpl())) src_rack = owner;
  }
  // Refused before anything is looked up on the current rack, which may not
  // even have the other rack's slot index.
  if (dst_slot >= 0) check_rack(dst, *current, kOp);
  if (src_slot >= 0) check_rack(self, **src_rack, kOp);
  // Aliases are per slot: the two ends may live on different slots (or one on
  // the host), and each end runs where its bytes are.
  std::optional<AliasSet> src_aliases, dst_aliases;
  at::Tensor src_exec = self;
  at::Tensor dst_exec = dst;
  if (dst_slot >= 0) dst_exec = dst_aliases.emplace(current, dst_slot, kOp).alias(dst, true);
  if (src_slot >= 0) src_exec = src_aliases.emplace(*src_rack, src_slot, kOp).alias(self, false);
  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    // Conversion temporaries count against the destination, where they would live.
    std::optional<RouteCpuAllocations> route;
    if (dst_slot >= 0 && current->is_emulated(dst_slot)) {
      route.emplace(current, dst_slot);
    } else {
      route.emplace();
    }
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
    timeline::record_copy((*src_rack)->generation(), src_slot, dst_slot,
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
