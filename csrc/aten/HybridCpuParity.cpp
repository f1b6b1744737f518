// An emulated slot must give the CPU's numbers bit for bit. ATen registers
// some ops both with a CPU kernel and with a CompositeExplicitAutograd kernel;
// the composite one serves every backend without its own kernel, PrivateUse1
// included, and its decomposed math rounds differently (native_layer_norm is
// one). For each such op we register the zero-copy fallback as the hybrid
// kernel, so the CPU kernel runs. Done at load time over the dispatcher's op
// table rather than as a hand-kept list, which would drift with torch versions.

#include "aten/HybridFallback.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <map>
#include <memory>

namespace hybrid {
namespace {

void parity_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { run_on_slot(op, stack); }

bool wants_cpu_kernel(const c10::OperatorHandle& op) {
  if (!op.hasKernelForDispatchKey(c10::DispatchKey::CPU)) return false;
  if (op.hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) return false;
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
}

} // namespace

int register_cpu_parity() {
  static int registered = -1;
  if (registered >= 0) return registered;
  // Libraries must outlive every dispatch through them: never freed.
  auto* libs = new std::map<std::string, std::unique_ptr<torch::Library>>();
  registered = 0;
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    auto op = dispatcher.findOp(name);
    if (!op || !wants_cpu_kernel(*op)) continue;
    const auto sep = name.name.find("::");
    if (sep == std::string::npos) continue;
    const std::string ns = name.name.substr(0, sep);
    std::string qualified = name.name.substr(sep + 2);
    if (!name.overload_name.empty()) qualified += "." + name.overload_name;
    auto& lib = (*libs)[ns];
    if (!lib) {
      lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1,
                                             __FILE__, __LINE__);
    }
    lib->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&parity_fallback>());
    ++registered;
  }
  return registered;
}

} // namespace hybrid
