// Unboxed hybrid kernels for the hottest elementwise and matmul ops (what a
// training loop runs most: add_, mul, addcmul_, lerp_, mm, ...). Without them
// these ops reach the boxed fallback (HybridFallback.cpp), whose fixed cost is
// a third of the CPU's own for a small tensor (callgrind, a one-element add_:
// 7,000 instructions over the CPU's 19,500): the dispatcher boxes the
// arguments into an IValue stack, each tensor copied onto it takes a second
// reference to a tensor Python holds, which costs the GIL (PyObject
// preservation), and the fallback copies the inputs again for the record.
//
// The kernel here does what the fallback does, in the same order, with the
// same shared pieces (HybridPlacement.h: placement, refusals, fidelity, the
// ledger's count under the op's own schema; AliasSet; SlotExecution; the
// timeline's record with the same cost key), on the arguments as the
// dispatcher passes them: the caller's references, borrowed, never copied.
// What differs is only what the boxed form forces. The fallback stays the
// reference: set_enabled(false) sends these ops through it (boxing their
// arguments as the dispatcher would), which is how the tests compare the
// timeline and the ledger of both paths.
//
// An op is routed here only when the fallback is what it reaches today (see
// route()), so that nothing but the path changes; register_unboxed() returns
// the names of those that were.

#include "aten/HybridAlias.h"
#include "aten/HybridFallback.h"
#include "aten/HybridPlacement.h"
#include "aten/HybridRefusals.h"
#include "model/HybridTimeline.h"
#include "runtime/HybridCpuRouting.h"
#include "runtime/HybridSlots.h"

#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/Operators.h>
#include <c10/util/MaybeOwned.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace hybrid {
namespace unboxed {
namespace {

std::atomic<bool> g_enabled{true};

template <typename T>
using Bare = std::remove_cv_t<std::remove_reference_t<T>>;

template <typename T>
constexpr bool is_tensor = std::is_same_v<Bare<T>, at::Tensor>;

// An argument as the execution device's kernel gets it: a hybrid tensor becomes
// its alias; anything else passes as it came.
template <typename T>
struct Passed {
  T value;
  Passed(T v, AliasSet&, bool) : value(v) {}
  T get() { return value; }
  const c10::TensorImpl* alias_impl() const { return nullptr; }
};

template <typename T>
struct TensorPassed {
  c10::MaybeOwned<at::Tensor> value;
  TensorPassed(const at::Tensor& t, AliasSet& aliases, bool written)
      : value(t.defined() && t.is_privateuseone()
                  ? c10::MaybeOwned<at::Tensor>::owned(aliases.alias(t, written, /*borrowed=*/true))
                  : c10::MaybeOwned<at::Tensor>::borrowed(t)) {}
  // An at::Tensor& argument (the op's self or out) is the same handle the kernel writes through.
  T get() { return const_cast<at::Tensor&>(*value); }
  const c10::TensorImpl* alias_impl() const { return value->unsafeGetTensorImpl(); }
};
template <>
struct Passed<at::Tensor&> : TensorPassed<at::Tensor&> { using TensorPassed::TensorPassed; };
template <>
struct Passed<const at::Tensor&> : TensorPassed<const at::Tensor&> { using TensorPassed::TensorPassed; };

template <>
struct Passed<const std::optional<at::Tensor>&> {
  std::optional<at::Tensor> value;
  Passed(const std::optional<at::Tensor>& t, AliasSet& aliases, bool written) {
    if (t.has_value() && t->defined() && t->is_privateuseone()) {
      value = aliases.alias(*t, written, /*borrowed=*/true);
    } else {
      value = t;
    }
  }
  const std::optional<at::Tensor>& get() { return value; }
  const c10::TensorImpl* alias_impl() const { return nullptr; }
};

// The op's tensor arguments, in order, for the placement walk and the record.
inline void collect(c10::SmallVector<const at::Tensor*, 4>& out, const at::Tensor& t) {
  if (t.defined()) out.push_back(&t);
}
inline void collect(c10::SmallVector<const at::Tensor*, 4>& out, const std::optional<at::Tensor>& t) {
  if (t.has_value() && t->defined()) out.push_back(&*t);
}
template <typename T>
void collect(c10::SmallVector<const at::Tensor*, 4>&, const T&) {
  // Only what the fallback reads without acting on it may pass here unnoticed: a device or a
  // generator argument would need its rewriting (HybridFallback.cpp), a tensor list its walk.
  static_assert(!std::is_same_v<T, c10::Device> && !std::is_same_v<T, std::optional<c10::Device>> &&
                    !std::is_same_v<T, std::optional<at::Generator>> && !std::is_same_v<T, at::TensorList> &&
                    !std::is_same_v<T, at::ITensorListRef> && !std::is_same_v<T, c10::List<std::optional<at::Tensor>>>,
                "an op with device, generator or tensor-list arguments stays on the boxed fallback");
}

template <class Op, class Schema = typename Op::schema>
struct Kernel;

template <class Op, class R, class... Args>
struct Kernel<Op, R(Args...)> {
  static_assert(std::is_same_v<R, at::Tensor> || std::is_same_v<R, at::Tensor&>,
                "an unboxed kernel returns one tensor");
  static constexpr size_t kArgs = sizeof...(Args);

  static const c10::OperatorHandle& op() {
    static const c10::OperatorHandle handle =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return handle;
  }

  // Per argument: the schema marks it as written (self of an in-place op, out=).
  static const std::array<bool, kArgs>& written() {
    static const std::array<bool, kArgs> flags = [] {
      std::array<bool, kArgs> w{};
      const auto& arguments = op().schema().arguments();
      TORCH_INTERNAL_ASSERT(arguments.size() == kArgs, Op::name, ": schema and signature disagree");
      for (size_t i = 0; i < kArgs; ++i) {
        const c10::AliasInfo* info = arguments[i].alias_info();
        w[i] = info != nullptr && info->isWrite();
      }
      return w;
    }();
    return flags;
  }

  // What run() hands back: the caller's own tensor for an in-place or out= op, a new one otherwise.
  using Result = std::conditional_t<std::is_same_v<R, at::Tensor&>, at::Tensor*, at::Tensor>;

  static R call(Args... args) {
    if (C10_UNLIKELY(!g_enabled.load(std::memory_order_relaxed))) return boxed(args...);
    Result result{};
    refusals::noting_failure(op(), [&](c10::DeviceIndex& slot) {
      result = run(slot, std::index_sequence_for<Args...>{}, args...);
    });
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      return *result;
    } else {
      return result;
    }
  }

  // The fallback itself, reached as the dispatcher reaches it for an op without this kernel.
  static R boxed(Args... args) {
    torch::jit::Stack stack = c10::impl::boxArgs<Args...>(args...);
    run_on_slot(op(), &stack);
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      at::Tensor* written = nullptr;
      ((written = written != nullptr ? written : writable<Args>(args)), ...);
      return *written;
    } else {
      return std::move(stack.back()).toTensor();
    }
  }

  // `a` when it is an at::Tensor& argument (what an in-place or out= op writes and returns).
  template <typename A, typename V>
  static at::Tensor* writable(V& a) {
    if constexpr (std::is_same_v<A, at::Tensor&>) {
      return &a;
    } else {
      return nullptr;
    }
  }

  template <size_t... I>
  static Result run(c10::DeviceIndex& slot_out, std::index_sequence<I...>, Args... args) {
    const c10::OperatorHandle& handle = op();
    const SlotTablePtr& rack = current_table();  // valid for the whole op (see current_table)
    c10::SmallVector<const at::Tensor*, 4> tensors;
    (collect(tensors, args), ...);
    Placement placement{*rack};
    for (const at::Tensor* t : tensors) placement.note_tensor(handle, *t);
    if (placement.slot < 0) {
      // No hybrid tensor: run where the tensors are, as the fallback does.
      return held(Op::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), args...));
    }
    placement.check_host_tensor(handle, false);
    const c10::DeviceIndex slot = placement.slot;
    slot_out = slot;
    const bool emulated = rack->is_emulated(slot);
    const c10::Device exec = execution_device(*rack, slot);
    admit_on_slot(handle, *rack, slot, emulated, placement.dtype);
    const bool recording = timeline::enabled();

    AliasSet aliases(rack, slot, handle.operator_name().name);
    const std::array<bool, kArgs>& writes = written();
    std::tuple<Passed<Args>...> passed{Passed<Args>(args, aliases, writes[I])...};

    std::unique_ptr<timeline::Measurement> measured;
    Result executed{};
    {
      SlotExecution execution(rack, slot, emulated, exec);
      if (!emulated && recording) {
        // On a real GPU the timeline keeps the op's measured time too.
        measured = std::make_unique<timeline::Measurement>();
        measured->start.record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(exec));
      }
      executed = held(Op::redispatch(c10::DispatchKeySet(execution_key(*rack, slot)), std::get<I>(passed).get()...));
      if (measured) {
        measured->end.record(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(exec));
      }
    }

    Result result{};
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      // The kernel returns the alias it wrote: the caller gets its own tensor back.
      const c10::TensorImpl* returned = executed->unsafeGetTensorImpl();
      ((result = result == nullptr && std::get<I>(passed).alias_impl() == returned ? writable<Args>(args) : result),
       ...);
      TORCH_INTERNAL_ASSERT(result != nullptr, Op::name, ": the kernel returned none of its written arguments");
    } else {
      result = aliases.to_hybrid(executed);
    }
    aliases.write_back_all();

    if (recording) {
      const at::Tensor& out = held_tensor(result);
      // Factory-like results of ops without a hybrid input are costed in their own dtype, as in the fallback.
      c10::ScalarType dtype = placement.dtype;
      if (dtype == c10::ScalarType::Undefined && out.defined()) dtype = out.scalar_type();
      timeline::record_op(handle, rack->generation(), slot, tensors.data(), tensors.size(), out, dtype,
                          std::move(measured));
    }
    return result;
  }

  static Result held(R r) {
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      return &r;
    } else {
      return r;
    }
  }
  static const at::Tensor& held_tensor(const Result& r) {
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      return *r;
    } else {
      return r;
    }
  }
};

// Registers Op's unboxed kernel when the op would reach run_on_slot without it: it has a CPU kernel and no
// kernel of ours, and no CompositeImplicitAutograd one that decomposes it before the hybrid key (the boxed
// fallback serves it, or CPU parity registers the fallback for it, which runs after this).
template <class Op>
void route(torch::Library& lib, std::vector<std::string>& routed) {
  const c10::OperatorHandle& op = Kernel<Op>::op();
  using K = c10::DispatchKey;
  const bool reaches_fallback = op.hasKernelForDispatchKey(K::CPU) && !op.hasKernelForDispatchKey(K::PrivateUse1) &&
      !op.hasKernelForDispatchKey(K::CompositeImplicitAutograd);
  if (!reaches_fallback) return;
  Kernel<Op>::written();  // checks the signature against the schema once, here
  std::string qualified = std::string(Op::name).substr(sizeof("aten::") - 1);
  if (*Op::overload_name != '\0') qualified += std::string(".") + Op::overload_name;
  lib.impl(qualified.c_str(), &Kernel<Op>::call);
  routed.push_back(std::move(qualified));
}

template <class... Ops>
void route_all(torch::Library& lib, std::vector<std::string>& routed) {
  (route<Ops>(lib, routed), ...);
}

} // namespace

bool set_enabled(bool on) { return g_enabled.exchange(on); }

const std::vector<std::string>& register_unboxed() {
  static const std::vector<std::string> routed = [] {
    std::vector<std::string> names;
    // Must outlive every dispatch through it: never freed.
    auto* lib = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    // What the training loops of benchmarks/training_loops.py and optimizers run most, per op.
    route_all<at::_ops::add_Tensor, at::_ops::add__Tensor, at::_ops::sub_Tensor, at::_ops::sub__Tensor,
              at::_ops::mul_Tensor, at::_ops::mul__Tensor, at::_ops::div_Tensor, at::_ops::div__Tensor,
              at::_ops::addcmul, at::_ops::addcmul_, at::_ops::addcdiv, at::_ops::addcdiv_, at::_ops::lerp_Scalar,
              at::_ops::lerp__Scalar, at::_ops::lerp_Tensor, at::_ops::lerp__Tensor, at::_ops::sqrt, at::_ops::sqrt_,
              at::_ops::rsqrt, at::_ops::neg, at::_ops::exp, at::_ops::tanh, at::_ops::sigmoid, at::_ops::relu,
              at::_ops::reciprocal, at::_ops::pow_Tensor_Scalar, at::_ops::maximum, at::_ops::clamp,
              at::_ops::where_self, at::_ops::fill__Scalar, at::_ops::zero_, at::_ops::threshold_backward,
              at::_ops::gelu, at::_ops::gelu_backward, at::_ops::tanh_backward, at::_ops::sigmoid_backward,
              at::_ops::sum_dim_IntList, at::_ops::mm, at::_ops::addmm, at::_ops::bmm>(*lib, names);
    return names;
  }();
  return routed;
}

} // namespace unboxed
} // namespace hybrid
