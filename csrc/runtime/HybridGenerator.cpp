#include "runtime/HybridGenerator.h"

#include "runtime/HybridSlots.h"

#include <c10/util/Exception.h>

#include <array>
#include <mutex>

namespace hybrid {

HybridGeneratorImpl::HybridGeneratorImpl(c10::DeviceIndex index)
    : c10::GeneratorImpl{c10::Device(c10::DeviceType::PrivateUse1, index),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)},
      // The CPU default generator starts from default_rng_seed_val too: unseeded
      // runs agree with the CPU as well.
      cpu_(at::make_generator<at::CPUGeneratorImpl>(c10::default_rng_seed_val)) {}

void HybridGeneratorImpl::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_current_seed(seed);
}

void HybridGeneratorImpl::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_offset(offset);
}

uint64_t HybridGeneratorImpl::get_offset() const { return cpu_.get_offset(); }
uint64_t HybridGeneratorImpl::current_seed() const { return cpu_.current_seed(); }

uint64_t HybridGeneratorImpl::seed() {
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.seed();
}

void HybridGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> HybridGeneratorImpl::get_state() const {
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.unsafeGetGeneratorImpl()->get_state();
}

HybridGeneratorImpl* HybridGeneratorImpl::clone_impl() const {
  auto* copy = new HybridGeneratorImpl(device().index());
  copy->cpu_ = cpu_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  // One per possible index, created on first use and kept across racks: a
  // seed set before a rack change still holds after it, as with CUDA devices.
  static std::array<at::Generator, kMaxSlots> generators;
  static std::array<std::once_flag, kMaxSlots> created;
  TORCH_CHECK_INDEX(index >= 0 && index < kMaxSlots, "hybrid generator index ",
                    static_cast<int>(index), " out of range (0..", static_cast<int>(kMaxSlots) - 1, ")");
  std::call_once(created[index], [index] {
    generators[index] = at::make_generator<HybridGeneratorImpl>(index);
  });
  return generators[index];
}

at::Generator new_generator(c10::DeviceIndex index) {
  return at::make_generator<HybridGeneratorImpl>(index);
}

at::Generator cpu_generator_for(const std::optional<at::Generator>& gen,
                                c10::DeviceIndex slot) {
  if (gen.has_value() && gen->defined()) {
    if (gen->device().type() == c10::DeviceType::CPU) return *gen;
    TORCH_CHECK(gen->device().type() == c10::DeviceType::PrivateUse1,
                "expected a hybrid or CPU generator, got one for ", gen->device());
    return gen->get<HybridGeneratorImpl>()->cpu();
  }
  return default_generator(slot).get<HybridGeneratorImpl>()->cpu();
}

} // namespace hybrid
