#include "runtime/HybridHostAllocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace hybrid::pinned {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> live;  // start address -> bytes
  Stats stats;
};

Registry& registry() {
  static Registry* instance = new Registry();  // outlives static destructors of other TUs
  return *instance;
}

void release(void* ptr) {
  if (ptr == nullptr) return;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    auto it = r.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != r.live.end()) {
      r.stats.live_bytes -= static_cast<int64_t>(it->second);
      r.live.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes == 0 ? nullptr : c10::alloc_cpu(nbytes);
    if (ptr != nullptr) {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.live.emplace(reinterpret_cast<uintptr_t>(ptr), nbytes);
      r.stats.live_bytes += static_cast<int64_t>(nbytes);
      r.stats.peak_bytes = std::max(r.stats.peak_bytes, r.stats.live_bytes);
      ++r.stats.allocations;
    }
    // Pinned memory is host memory: its DataPtr says CPU, as CUDA's pinned allocator's does.
    return {ptr, ptr, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  void copy_data(void* dest, const void* src, std::size_t count) const final {
    default_copy_data(dest, src, count);
  }
};

} // namespace

c10::Allocator* allocator() {
  static PinnedAllocator instance;
  return &instance;
}

bool contains(const void* ptr) {
  if (ptr == nullptr) return false;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.upper_bound(address);
  if (it == r.live.begin()) return false;
  --it;
  return address < it->first + it->second;
}

Stats stats() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.stats;
}

} // namespace hybrid::pinned
