#include "aten/HybridFidelity.h"

#include <c10/util/Exception.h>

#include <map>
#include <mutex>

namespace hybrid::fidelity {

static_assert(static_cast<int>(c10::ScalarType::NumOptions) <= 64,
              "the fidelity mask holds one bit per ScalarType");

namespace detail {
std::atomic<uint64_t> g_masks[kMaxSlots] = {};
} // namespace detail

namespace {

struct Key {
  const void* op;
  uint64_t rack;
  c10::DeviceIndex slot;
  c10::ScalarType dtype;
  bool operator<(const Key& o) const {
    return std::tie(op, rack, slot, dtype) < std::tie(o.op, o.rack, o.slot, o.dtype);
  }
};

struct Verdict {
  Decision decision;
  std::string message;
};

struct Tally {
  std::string op;
  uint64_t count = 0;
};

// Verdicts are forgotten when strictness or the rack changes; tallies last
// until reset_counts, so a report spans the whole run.
struct State {
  std::mutex mutex;
  std::map<Key, Verdict> verdicts;
  std::map<Key, Tally> tallies;
  Hook hook;
};

State& state() {
  static State* instance = new State();  // outlives static destructors of other TUs
  return *instance;
}

std::string op_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

} // namespace

void set_mask(c10::DeviceIndex slot, const std::vector<c10::ScalarType>& dtypes) {
  TORCH_CHECK(slot >= 0 && slot < kMaxSlots, "fidelity mask: slot ", static_cast<int>(slot), " out of range");
  uint64_t mask = 0;
  for (c10::ScalarType t : dtypes) mask |= uint64_t{1} << static_cast<unsigned>(t);
  detail::g_masks[slot].store(mask, std::memory_order_relaxed);
}

void clear_masks() {
  for (auto& mask : detail::g_masks) mask.store(0, std::memory_order_relaxed);
}

void set_hook(Hook hook) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.hook = std::move(hook);
}

void reset_decisions() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.verdicts.clear();
}

void detail::check_slow(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot,
                        c10::ScalarType dtype) {
  State& s = state();
  const Key key{&op.schema(), rack.generation(), slot, dtype};
  Hook hook;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.verdicts.find(key);
    if (it != s.verdicts.end()) {
      const Verdict& v = it->second;
      if (v.decision != Decision::Native) ++s.tallies[key].count;
      TORCH_CHECK_NOT_IMPLEMENTED(v.decision != Decision::Refuse, v.message);
      return;
    }
    hook = s.hook;
  }
  if (!hook) return;
  // Decided outside the lock: the hook takes the GIL, and another thread
  // holding it may be waiting to record its own op here.
  const std::string name = op_name(op);
  auto [decision, message] = hook(name, rack.generation(), slot, dtype);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.verdicts.emplace(key, Verdict{decision, message});
    if (decision != Decision::Native) {
      Tally& t = s.tallies[key];
      t.op = name;
      ++t.count;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(decision != Decision::Refuse, message);
}

std::vector<std::tuple<std::string, uint64_t, int, c10::ScalarType, uint64_t>> counts() {
  State& s = state();
  std::vector<std::tuple<std::string, uint64_t, int, c10::ScalarType, uint64_t>> out;
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& [key, t] : s.tallies) {
    out.emplace_back(t.op, key.rack, static_cast<int>(key.slot), key.dtype, t.count);
  }
  return out;
}

void reset_counts() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.tallies.clear();
}

} // namespace hybrid::fidelity
