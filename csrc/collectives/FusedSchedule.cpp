// A collective's schedule, compiled by collectives/fused.py, run over host
// memory in one pass: every output region is one expression of the input
// regions (the reduce op applied in the schedule's order and association), so
// each block of a chunk reads its inputs once, combines them in a scratch
// block that stays in L1, and writes the result to every participant that
// receives it. No step allocates, nothing is copied between steps, and the
// memory traffic of the collective is what it costs.
//
// The arithmetic is the step-by-step executor's, element for element:
// float16/bfloat16/float8 widen to float32 and round once at the end (c10's
// round-to-nearest-even conversions, as torch's copy), integers wrap, bool
// sum/prod/max/min are or/and, and min/max of floats follow torch's vectorised
// kernels (the smaller of a < b ? a : b, all-ones NaN when either is NaN).
// avg divides and premul_sum multiplies once at the end, in the work type.
//
// Blocks are shared out over torch's OpenMP threads: GOMP_parallel is what
// `#pragma omp parallel` compiles to, declared weak so that a torch without
// libgomp runs the blocks on the calling thread.

#include <torch/csrc/utils/pybind.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Half.h>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

extern "C" {
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) __attribute__((weak));
}

namespace py = pybind11;

// The extension is built at -O2, where GCC vectorises only loops whose trip count it knows; these loops
// are the whole cost of a collective, so this file's kernel code asks for -O3 (loop vectorisation).
#pragma GCC push_options
#pragma GCC optimize("O3")

namespace hybrid {
namespace {

enum class Reduce : int { Sum = 0, Prod = 1, Min = 2, Max = 3, Band = 4, Bor = 5, Bxor = 6 };
enum class Post : int { None = 0, Div = 1, DivTrunc = 2, Mul = 3 };

constexpr int64_t kBlockBytes = 8192;       // one operand's block: several fit in L1 beside the inputs
constexpr int64_t kSerialBytes = 256 << 10;  // below this much traffic one thread is faster than waking others
constexpr int kLeafOp = -1;
constexpr int kMaxStack = 256;  // values on a step's evaluation stack (leaves and computed blocks)

struct Step {
  int64_t count;
  int32_t code0, code1, leaf0, leaf1, dst0, dst1;
  bool identity;
};

// The compiled schedule (collectives.fused.Program), built once per schedule and sharing.
struct Program {
  std::vector<Step> steps;
  std::vector<int32_t> code;
  std::vector<int32_t> leaf_src;
  std::vector<int64_t> leaf_off;
  std::vector<int32_t> dst_idx;
  std::vector<int64_t> dst_off;
  std::vector<int64_t> src_extent;  // elements each source must hold
  std::vector<int64_t> dst_extent;  // elements each destination must hold
  int depth = 0;
  bool reduces = false;
};

using ProgramPtr = std::shared_ptr<Program>;

ProgramPtr make_program(const py::list& steps, int depth, int sources, int dests) {
  TORCH_CHECK(depth >= 0 && depth < kMaxStack, "fused program: depth ", depth, " out of range");
  auto prog = std::make_shared<Program>();
  prog->depth = depth;
  prog->src_extent.assign(sources, 0);
  prog->dst_extent.assign(dests, 0);
  for (const auto& item : steps) {
    auto t = item.cast<py::tuple>();
    TORCH_CHECK(t.size() == 5, "fused program: a step is (count, code, leaves, dsts, identity)");
    Step s{};
    s.count = t[0].cast<int64_t>();
    TORCH_CHECK(s.count >= 0, "fused program: negative count");
    s.code0 = static_cast<int32_t>(prog->code.size());
    int stack = 0, max_stack = 0;
    for (const auto& c : t[1].cast<std::vector<int32_t>>()) {
      prog->code.push_back(c);
      if (c == kLeafOp) {
        TORCH_CHECK(stack >= 2, "fused program: an op needs two values");
        --stack;
        prog->reduces = true;
      } else {
        max_stack = std::max(max_stack, ++stack);
      }
    }
    s.code1 = static_cast<int32_t>(prog->code.size());
    TORCH_CHECK(stack == 1, "fused program: a step's code must leave one value");
    TORCH_CHECK(max_stack <= kMaxStack, "fused program: a step needs ", max_stack, " values at once (at most ",
                kMaxStack, ")");
    s.leaf0 = static_cast<int32_t>(prog->leaf_src.size());
    for (const auto& [src, off] : t[2].cast<std::vector<std::pair<int32_t, int64_t>>>()) {
      TORCH_CHECK(src >= 0 && src < sources && off >= 0, "fused program: leaf out of range");
      prog->leaf_src.push_back(src);
      prog->leaf_off.push_back(off);
      prog->src_extent[src] = std::max(prog->src_extent[src], off + s.count);
    }
    s.leaf1 = static_cast<int32_t>(prog->leaf_src.size());
    for (int32_t k = s.code0; k < s.code1; ++k) {
      TORCH_CHECK(prog->code[k] < s.leaf1 - s.leaf0, "fused program: code names a missing leaf");
    }
    s.dst0 = static_cast<int32_t>(prog->dst_idx.size());
    for (const auto& [dst, off] : t[3].cast<std::vector<std::pair<int32_t, int64_t>>>()) {
      TORCH_CHECK(dst >= 0 && dst < dests && off >= 0, "fused program: destination out of range");
      prog->dst_idx.push_back(dst);
      prog->dst_off.push_back(off);
      prog->dst_extent[dst] = std::max(prog->dst_extent[dst], off + s.count);
    }
    s.dst1 = static_cast<int32_t>(prog->dst_idx.size());
    s.identity = t[4].cast<bool>();
    prog->steps.push_back(s);
  }
  return prog;
}

// -- element operations ---------------------------------------------------------------------------

template <typename W>
inline W nan_all_ones() {
  using Bits = std::conditional_t<sizeof(W) == 8, uint64_t, uint32_t>;
  Bits ones = ~Bits(0);
  W out;
  std::memcpy(&out, &ones, sizeof(W));
  return out;
}

template <typename W, Reduce R>
struct Combine;

template <typename W>
using Unsigned = std::make_unsigned_t<W>;

template <typename W>
struct Combine<W, Reduce::Sum> {
  static inline W apply(W a, W b) {
    if constexpr (std::is_integral_v<W>) {
      return static_cast<W>(static_cast<Unsigned<W>>(a) + static_cast<Unsigned<W>>(b));
    } else {
      return a + b;
    }
  }
};

template <typename W>
struct Combine<W, Reduce::Prod> {
  static inline W apply(W a, W b) {
    if constexpr (std::is_integral_v<W>) {
      // In the type's width, wrapping (unsigned avoids int promotion's overflow).
      using U = std::conditional_t<(sizeof(W) < sizeof(unsigned)), unsigned, Unsigned<W>>;
      return static_cast<W>(static_cast<U>(static_cast<Unsigned<W>>(a)) * static_cast<U>(static_cast<Unsigned<W>>(b)));
    } else {
      return a * b;
    }
  }
};

template <typename W>
struct Combine<W, Reduce::Min> {
  static inline W apply(W a, W b) {
    if constexpr (std::is_floating_point_v<W>) {
      W r = a < b ? a : b;
      return (a != a || b != b) ? nan_all_ones<W>() : r;
    } else {
      return a < b ? a : b;
    }
  }
};

template <typename W>
struct Combine<W, Reduce::Max> {
  static inline W apply(W a, W b) {
    if constexpr (std::is_floating_point_v<W>) {
      W r = a > b ? a : b;
      return (a != a || b != b) ? nan_all_ones<W>() : r;
    } else {
      return a > b ? a : b;
    }
  }
};

template <typename W>
struct Combine<W, Reduce::Band> {
  static inline W apply(W a, W b) { return static_cast<W>(a & b); }
};
template <typename W>
struct Combine<W, Reduce::Bor> {
  static inline W apply(W a, W b) { return static_cast<W>(a | b); }
};
template <typename W>
struct Combine<W, Reduce::Bxor> {
  static inline W apply(W a, W b) { return static_cast<W>(a ^ b); }
};

// bool is stored as one byte: combined as truth values.
struct BoolCombine {
  Reduce r;
  inline uint8_t apply(uint8_t a, uint8_t b) const {
    const bool x = a != 0, y = b != 0;
    switch (r) {
      case Reduce::Sum:
      case Reduce::Max:
      case Reduce::Bor:
        return x || y;
      case Reduce::Prod:
      case Reduce::Min:
      case Reduce::Band:
        return x && y;
      default:
        return x != y;
    }
  }
};

struct Params {
  Post post = Post::None;
  double factor = 1.0;
  int64_t ifactor = 1;
  int64_t divisor = 1;
};

// -- one block of one step --------------------------------------------------------------------------

// A value on the evaluation stack: a leaf (input memory, storage type T) or a computed block (work type W).
struct Value {
  const void* ptr;
  int slot;  // scratch slot, or -1 for a leaf
};

template <typename T, typename W, typename C>
struct BlockRunner {
  const Program& prog;
  char* const* src;  // per source index, base pointer (storage elements)
  char* const* dst;
  const Params& params;
  C combine;
  int64_t mult;  // storage elements per program element (2 for complex)

  static constexpr bool kSame = std::is_same_v<T, W>;

  static void widen(W* __restrict out, const T* __restrict x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<W>(x[i]);
  }
  static void narrow(T* __restrict out, const W* __restrict x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(x[i]);
  }

  // The result goes to a computed operand's block (in place) or, for two leaves, to a fresh block. Each loop
  // sees distinct (restrict) pointers, so it vectorises.
  static void into_left(W* __restrict x, const W* __restrict y, int64_t n, C c) {
    for (int64_t i = 0; i < n; ++i) x[i] = c.apply(x[i], y[i]);
  }
  static void into_left(W* __restrict x, const T* __restrict y, int64_t n, C c) requires(!kSame) {
    for (int64_t i = 0; i < n; ++i) x[i] = c.apply(x[i], static_cast<W>(y[i]));
  }
  static void into_right(const W* __restrict x, W* __restrict y, int64_t n, C c) {
    for (int64_t i = 0; i < n; ++i) y[i] = c.apply(x[i], y[i]);
  }
  static void into_right(const T* __restrict x, W* __restrict y, int64_t n, C c) requires(!kSame) {
    for (int64_t i = 0; i < n; ++i) y[i] = c.apply(static_cast<W>(x[i]), y[i]);
  }
  static void fresh(W* __restrict out, const T* __restrict x, const T* __restrict y, int64_t n, C c) {
    for (int64_t i = 0; i < n; ++i) out[i] = c.apply(static_cast<W>(x[i]), static_cast<W>(y[i]));
  }

  void combine_into(W* out, Value a, Value b, int64_t n) const {
    const bool ac = a.slot >= 0, bc = b.slot >= 0;
    if (ac) {  // out is a's block
      if (bc) {
        into_left(out, static_cast<const W*>(b.ptr), n, combine);
      } else {
        into_left(out, static_cast<const T*>(b.ptr), n, combine);
      }
    } else if (bc) {  // out is b's block
      into_right(static_cast<const T*>(a.ptr), out, n, combine);
    } else {
      fresh(out, static_cast<const T*>(a.ptr), static_cast<const T*>(b.ptr), n, combine);
    }
  }

  void finish(W* v, int64_t n) const {
    switch (params.post) {
      case Post::Div: {
        if constexpr (std::is_floating_point_v<W>) {
          const W d = static_cast<W>(params.divisor);
          for (int64_t i = 0; i < n; ++i) v[i] = v[i] / d;
        }
        break;
      }
      case Post::DivTrunc: {
        if constexpr (std::is_integral_v<W>) {
          const W d = static_cast<W>(params.divisor);  // the divisor in the tensor's type, as torch casts it
          for (int64_t i = 0; i < n; ++i) v[i] = static_cast<W>(v[i] / d);
        }
        break;
      }
      case Post::Mul: {
        if constexpr (std::is_floating_point_v<W>) {
          const W f = static_cast<W>(params.factor);
          for (int64_t i = 0; i < n; ++i) v[i] = v[i] * f;
        } else if constexpr (std::is_integral_v<W>) {
          const W f = static_cast<W>(params.ifactor);
          for (int64_t i = 0; i < n; ++i) v[i] = Combine<W, Reduce::Prod>::apply(v[i], f);
        }
        break;
      }
      default:
        break;
    }
  }

  // Elements [j0, j0 + n) of step s (program elements; storage elements are mult times as many).
  void run(const Step& s, int64_t j0, int64_t n, void* arena, int64_t block) const {
    W* scratch = static_cast<W*>(arena);
    const int64_t e0 = j0 * mult, en = n * mult;
    Value stack[kMaxStack];
    int top = 0;
    int free_slots[kMaxStack];
    int n_free = 0;
    for (int k = prog.depth; k >= 0; --k) free_slots[n_free++] = k;  // depth + 1 slots: one spare for finish()
    for (int32_t c = s.code0; c < s.code1; ++c) {
      const int32_t op = prog.code[c];
      if (op != kLeafOp) {
        const int32_t leaf = s.leaf0 + op;
        const T* base = reinterpret_cast<const T*>(src[prog.leaf_src[leaf]]);
        stack[top++] = Value{base + prog.leaf_off[leaf] * mult + e0, -1};
        continue;
      }
      const Value b = stack[--top];
      const Value a = stack[--top];
      int slot;
      if (a.slot >= 0) {
        slot = a.slot;
        if (b.slot >= 0) free_slots[n_free++] = b.slot;
      } else if (b.slot >= 0) {
        slot = b.slot;
      } else {
        slot = free_slots[--n_free];
      }
      W* out = scratch + slot * block * mult;
      combine_into(out, a, b, en);
      stack[top++] = Value{out, slot};
    }
    Value v = stack[0];
    const bool post = params.post != Post::None;
    if (v.slot < 0 && (post || !kSame)) {
      if (post) {
        const int slot = free_slots[--n_free];
        W* out = scratch + slot * block * mult;
        widen(out, static_cast<const T*>(v.ptr), en);
        v = Value{out, slot};
      }
    }
    if (v.slot >= 0 && post) finish(const_cast<W*>(static_cast<const W*>(v.ptr)), en);
    for (int32_t d = s.dst0; d < s.dst1; ++d) {
      T* out = reinterpret_cast<T*>(dst[prog.dst_idx[d]]) + prog.dst_off[d] * mult + e0;
      if (v.slot < 0) {
        const T* x = static_cast<const T*>(v.ptr);
        if (x != out) std::memcpy(out, x, en * sizeof(T));
      } else {
        const W* x = static_cast<const W*>(v.ptr);
        if constexpr (kSame) {
          std::memcpy(out, x, en * sizeof(T));
        } else {
          narrow(out, x, en);
        }
      }
    }
  }
};

// Programs that only move data: each step is one leaf copied to its destinations, bytes as they are.
template <int Size>
struct CopyRunner {
  const Program& prog;
  char* const* src;
  char* const* dst;

  void run(const Step& s, int64_t j0, int64_t n, void*, int64_t) const {
    const int32_t leaf = s.leaf0 + prog.code[s.code0];
    const char* from = src[prog.leaf_src[leaf]] + (prog.leaf_off[leaf] + j0) * Size;
    for (int32_t d = s.dst0; d < s.dst1; ++d) {
      char* to = dst[prog.dst_idx[d]] + (prog.dst_off[d] + j0) * Size;
      if (to != from) std::memcpy(to, from, n * Size);
    }
  }
};

// -- spreading blocks over threads ------------------------------------------------------------------

struct Work {
  const std::vector<int64_t>* starts;  // first global block of each step (and the total at the end)
  const std::vector<int32_t>* order;   // the steps that run, in order
  int64_t block;                       // program elements per block
  std::atomic<int64_t> next{0};
  std::atomic<int> slots{0};
  void* runner;
  void (*run_block)(void* runner, int32_t step, int64_t j0, int64_t n, int worker);
};

void drain(Work& w, int worker) {
  const auto& starts = *w.starts;
  const int64_t total = starts.back();
  constexpr int64_t kGrab = 4;  // blocks taken at a time
  for (;;) {
    const int64_t first = w.next.fetch_add(kGrab, std::memory_order_relaxed);
    if (first >= total) return;
    const int64_t last = std::min(total, first + kGrab);
    for (int64_t g = first; g < last; ++g) {
      const auto it = std::upper_bound(starts.begin(), starts.end(), g) - 1;
      const int32_t k = static_cast<int32_t>(it - starts.begin());
      w.run_block(w.runner, k, (g - *it) * w.block, 0, worker);
    }
  }
}

void gomp_entry(void* data) {
  auto* w = static_cast<Work*>(data);
  const int worker = w->slots.fetch_add(1, std::memory_order_relaxed);
  drain(*w, worker);
}

// Runs every block of the steps in ``order`` with ``runner.run(step, j0, n, scratch, block)``, spread over
// torch's threads when there is enough traffic; ``unit`` bytes per program element, ``slots`` scratch blocks.
template <typename Runner>
void execute(const Runner& runner, const Program& prog, const std::vector<int32_t>& order, int64_t unit,
             int slots, int64_t traffic_bytes) {
  const int64_t block = std::max<int64_t>(1, kBlockBytes / unit);
  std::vector<int64_t> starts;
  starts.reserve(order.size() + 1);
  int64_t total = 0;
  for (int32_t k : order) {
    starts.push_back(total);
    total += (prog.steps[k].count + block - 1) / block;
  }
  starts.push_back(total);
  if (total == 0) return;
  int threads = 1;
  if (GOMP_parallel != nullptr && traffic_bytes >= kSerialBytes && !at::in_parallel_region()) {
    threads = static_cast<int>(std::min<int64_t>(at::get_num_threads(), total));
  }
  // One scratch arena per calling thread, grown once: no step allocates.
  thread_local std::vector<char> arena;
  const size_t per_worker = static_cast<size_t>(slots) * block * unit + 64;
  if (arena.size() < per_worker * threads) arena.resize(per_worker * threads);
  struct Ctx {
    const Runner* runner;
    const std::vector<int32_t>* order;
    const Program* prog;
    char* arena;
    size_t per_worker;
    int64_t block;
  } ctx{&runner, &order, &prog, arena.data(), per_worker, block};
  Work w;
  w.starts = &starts;
  w.order = &order;
  w.block = block;
  w.runner = &ctx;
  w.run_block = [](void* p, int32_t k, int64_t j0, int64_t, int worker) {
    auto* c = static_cast<Ctx*>(p);
    const Step& s = c->prog->steps[(*c->order)[k]];
    const int64_t n = std::min(c->block, s.count - j0);
    auto base = reinterpret_cast<uintptr_t>(c->arena + c->per_worker * worker);
    c->runner->run(s, j0, n, reinterpret_cast<void*>((base + 63) & ~uintptr_t(63)), c->block);
  };
  if (threads > 1) {
    GOMP_parallel(&gomp_entry, &w, static_cast<unsigned>(threads), 0);
  } else {
    drain(w, 0);
  }
}

template <typename T, typename W, typename C>
void execute(const Program& prog, const std::vector<int32_t>& order, char* const* src, char* const* dst,
             const Params& params, C combine, int64_t mult, int64_t traffic_bytes) {
  const BlockRunner<T, W, C> runner{prog, src, dst, params, combine, mult};
  execute(runner, prog, order, static_cast<int64_t>(sizeof(W)) * mult, prog.depth + 1, traffic_bytes);
}

template <typename T, typename W>
void dispatch_reduce(Reduce r, const Program& prog, const std::vector<int32_t>& order, char* const* src,
                     char* const* dst, const Params& params, int64_t mult, int64_t traffic) {
  switch (r) {
    case Reduce::Sum:
      return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Sum>{}, mult, traffic);
    case Reduce::Prod:
      return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Prod>{}, mult, traffic);
    case Reduce::Min:
      return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Min>{}, mult, traffic);
    case Reduce::Max:
      return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Max>{}, mult, traffic);
    case Reduce::Band:
    case Reduce::Bor:
    case Reduce::Bxor:
      if constexpr (std::is_integral_v<W>) {
        if (r == Reduce::Band)
          return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Band>{}, mult, traffic);
        if (r == Reduce::Bor)
          return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Bor>{}, mult, traffic);
        return execute<T, W>(prog, order, src, dst, params, Combine<W, Reduce::Bxor>{}, mult, traffic);
      }
      break;
  }
  TORCH_CHECK(false, "fused collective: reduce op ", static_cast<int>(r), " is not defined on this dtype");
}

void run_fused(const ProgramPtr& program, const std::vector<std::optional<at::Tensor>>& sources,
               const std::vector<std::optional<at::Tensor>>& dests, int reduce, int post, double factor,
               int64_t ifactor, int64_t divisor, bool widened) {
  RECORD_FUNCTION("hybrid::fused_collective", c10::ArrayRef<const c10::IValue>{});
  const Program& prog = *program;
  TORCH_CHECK(sources.size() == prog.src_extent.size() && dests.size() == prog.dst_extent.size(),
              "fused collective: expected ", prog.src_extent.size(), " sources and ", prog.dst_extent.size(),
              " destinations");
  std::vector<char*> src(sources.size(), nullptr), dst(dests.size(), nullptr);
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  auto take = [&](const std::optional<at::Tensor>& t, int64_t extent, const char* what, size_t i) -> char* {
    if (extent == 0) return nullptr;
    TORCH_CHECK(t.has_value() && t->defined(), "fused collective: ", what, " ", i, " is missing");
    TORCH_CHECK(t->device().is_cpu(), "fused collective: ", what, " ", i, " is not in host memory");
    TORCH_CHECK(t->is_contiguous(), "fused collective: ", what, " ", i, " is not contiguous");
    TORCH_CHECK(t->numel() >= extent, "fused collective: ", what, " ", i, " holds ", t->numel(),
                " elements, the schedule needs ", extent);
    if (dtype == c10::ScalarType::Undefined) dtype = t->scalar_type();
    TORCH_CHECK(t->scalar_type() == dtype, "fused collective: mixed dtypes");
    return static_cast<char*>(t->data_ptr());
  };
  int64_t elements = 0;
  for (size_t i = 0; i < sources.size(); ++i) src[i] = take(sources[i], prog.src_extent[i], "source", i);
  for (size_t i = 0; i < dests.size(); ++i) dst[i] = take(dests[i], prog.dst_extent[i], "destination", i);
  if (dtype == c10::ScalarType::Undefined) return;
  Params params;
  params.post = static_cast<Post>(post);
  params.factor = factor;
  params.ifactor = ifactor;
  params.divisor = divisor;
  std::vector<int32_t> order;
  order.reserve(prog.steps.size());
  for (size_t k = 0; k < prog.steps.size(); ++k) {
    const Step& s = prog.steps[k];
    if (s.identity && params.post == Post::None) continue;  // an output left as it was
    order.push_back(static_cast<int32_t>(k));
    elements += s.count * ((s.leaf1 - s.leaf0) + (s.dst1 - s.dst0));
  }
  const int64_t itemsize = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t traffic = elements * itemsize;
  py::gil_scoped_release no_gil;
  if (!prog.reduces && params.post == Post::None) {
    switch (itemsize) {
      case 1: return execute(CopyRunner<1>{prog, src.data(), dst.data()}, prog, order, 1, 0, traffic);
      case 2: return execute(CopyRunner<2>{prog, src.data(), dst.data()}, prog, order, 2, 0, traffic);
      case 4: return execute(CopyRunner<4>{prog, src.data(), dst.data()}, prog, order, 4, 0, traffic);
      case 8: return execute(CopyRunner<8>{prog, src.data(), dst.data()}, prog, order, 8, 0, traffic);
      case 16: return execute(CopyRunner<16>{prog, src.data(), dst.data()}, prog, order, 16, 0, traffic);
      default: break;
    }
    TORCH_CHECK(false, "fused collective: no copy for ", itemsize, "-byte elements");
  }
  const Reduce r = static_cast<Reduce>(reduce);
  const auto* s = src.data();
  const auto* d = dst.data();
  using namespace c10;
  switch (dtype) {
    case ScalarType::Float: return dispatch_reduce<float, float>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Double: return dispatch_reduce<double, double>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::ComplexFloat: return dispatch_reduce<float, float>(r, prog, order, s, d, params, 2, traffic);
    case ScalarType::ComplexDouble: return dispatch_reduce<double, double>(r, prog, order, s, d, params, 2, traffic);
    case ScalarType::Half:
      TORCH_CHECK(widened, "fused collective: float16 reduces in float32");
      return dispatch_reduce<Half, float>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::BFloat16:
      TORCH_CHECK(widened, "fused collective: bfloat16 reduces in float32");
      return dispatch_reduce<BFloat16, float>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Float8_e4m3fn:
      TORCH_CHECK(widened, "fused collective: float8 reduces in float32");
      return dispatch_reduce<Float8_e4m3fn, float>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Float8_e5m2:
      TORCH_CHECK(widened, "fused collective: float8 reduces in float32");
      return dispatch_reduce<Float8_e5m2, float>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Char: return dispatch_reduce<int8_t, int8_t>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Short: return dispatch_reduce<int16_t, int16_t>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Int: return dispatch_reduce<int32_t, int32_t>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Long: return dispatch_reduce<int64_t, int64_t>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Byte: return dispatch_reduce<uint8_t, uint8_t>(r, prog, order, s, d, params, 1, traffic);
    case ScalarType::Bool:
      return execute<uint8_t, uint8_t>(prog, order, s, d, params, BoolCombine{r}, 1, traffic);
    default:
      break;
  }
  TORCH_CHECK(false, "fused collective: does not reduce ", dtype);
}

}  // namespace

void bind_fused_collectives(py::module& m) {
  py::class_<Program, ProgramPtr>(m, "_FusedProgram")
      .def(py::init(&make_program), py::arg("steps"), py::arg("depth"), py::arg("sources"), py::arg("dests"),
           "A schedule compiled by collectives.fused: steps of (count, postfix code, leaves [(source, offset)], "
           "destinations [(destination, offset)], identity).")
      .def_property_readonly("steps", [](const Program& p) { return p.steps.size(); });
  m.def("_run_fused", &run_fused, py::arg("program"), py::arg("sources"), py::arg("dests"), py::arg("reduce"),
        py::arg("post"), py::arg("factor"), py::arg("ifactor"), py::arg("divisor"), py::arg("widened"),
        "Run a fused collective program over host tensors (see collectives.executor).");
}

}  // namespace hybrid

#pragma GCC pop_options
