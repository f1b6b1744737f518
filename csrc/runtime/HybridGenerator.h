#pragma once
// Per-slot random generators. An emulated slot runs the CPU kernels, so its
// generator is a CPU generator underneath: with the same seed it yields exactly
// the CPU's numbers. The outer object carries the PrivateUse1 device so that
// torch.Generator(device="hybrid:N") and torch.hybrid.get_rng_state work.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace hybrid {

struct HybridGeneratorImpl final : public c10::GeneratorImpl {
  explicit HybridGeneratorImpl(c10::DeviceIndex index);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The CPU generator the kernels actually draw from.
  at::Generator cpu() const { return cpu_; }

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  HybridGeneratorImpl* clone_impl() const override;
  mutable at::Generator cpu_;
};

const at::Generator& default_generator(c10::DeviceIndex index);
at::Generator new_generator(c10::DeviceIndex index);

// The CPU generator behind a hybrid generator (or the slot's default when
// `gen` is empty), for handing to a CPU kernel.
at::Generator cpu_generator_for(const std::optional<at::Generator>& gen,
                                c10::DeviceIndex slot);

} // namespace hybrid
