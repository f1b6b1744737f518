#include "aten/HybridRefusals.h"

#include <c10/util/Exception.h>

#include <mutex>

namespace hybrid::refusals {
namespace {

std::mutex& mutex() {
  static std::mutex m;
  return m;
}

std::unordered_map<std::string, std::string>& table() {
  static auto* t = new std::unordered_map<std::string, std::string>();  // never freed: read at exit
  return *t;
}

struct Failure {
  std::string op;
  int slot = -1;
  std::string message;
};

Failure& last() {
  static auto* f = new Failure();
  return *f;
}

} // namespace

void set_cuda_only(std::unordered_map<std::string, std::string> instead) {
  std::lock_guard<std::mutex> lock(mutex());
  table() = std::move(instead);
}

void refuse_cuda_only(const c10::OperatorHandle& op, const SlotTable& rack, c10::DeviceIndex slot) {
  const c10::OperatorName& full = op.operator_name();
  const std::string& name = full.name;
  const std::string overload = full.overload_name.empty() ? name : name + "." + full.overload_name;
  std::string instead;
  {
    // The overload, then the op, then a family ("aten::cudnn_*"): the cold path of a refusal.
    std::lock_guard<std::mutex> lock(mutex());
    for (const std::string& key : {overload, name}) {
      auto it = table().find(key);
      if (it != table().end()) {
        instead = it->second;
        break;
      }
    }
    if (instead.empty()) {
      size_t longest = 0;  // the most specific family
      for (const auto& [key, text] : table()) {
        if (!key.empty() && key.back() == '*' && key.size() > longest &&
            name.compare(0, key.size() - 1, key, 0, key.size() - 1) == 0) {
          instead = text;
          longest = key.size();
        }
      }
    }
  }
  if (instead.empty()) {
    instead = "move its tensors to the CPU for this op (torch has a kernel for it on CUDA only), or run on a "
              "cuda-backed slot";
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, overload, " cannot run on ", rack.label(slot),
                              ": torch implements it for CUDA only, and an emulated slot runs the CPU's "
                              "kernels. Instead: ", instead);
}

void note_failure(const std::string& op, c10::DeviceIndex slot, const char* message) noexcept {
  try {
    std::lock_guard<std::mutex> lock(mutex());
    Failure& f = last();
    f.op = op;
    f.slot = static_cast<int>(slot);
    f.message = message;
  } catch (...) {
    // Keeping the note must never replace the error being raised.
  }
}

std::tuple<std::string, int, std::string> last_failure() {
  std::lock_guard<std::mutex> lock(mutex());
  const Failure& f = last();
  return {f.op, f.slot, f.message};
}

void clear_last_failure() {
  std::lock_guard<std::mutex> lock(mutex());
  last() = Failure();
}

} // namespace hybrid::refusals
