#include "server/transform/chain.h"

#include "server/transform/eligibility.h"

namespace tally::server::transform {
namespace {

// Wait first: the signal then lets the kernel after this one be scheduled only once this one
// runs for real, so at most one kernel of the stream waits on the GPU at a time.
constexpr const char* kPrologue = R"(
griddepcontrol.wait;
griddepcontrol.launch_dependents;
)";

// Why no kernel of `module` may be chained; empty when they may.
std::string moduleObstacle(const Module& module) {
  const unsigned arch = targetArch(module);
  if (arch < kChainMinArch) {
    return "chaining needs .target sm_" + std::to_string(kChainMinArch) + " or newer (sm_" + std::to_string(arch) + ")";
  }
  return {};
}

}  // namespace

VariantResult makeChainedKernel(const Function& kernel) {
  VariantResult result;
  if (!kernel.isEntry || !kernel.hasBody || !kernel.bodyError.empty()) {
    result.error = kernel.name + " is not a parsed kernel definition";
    return result;
  }
  Function f = kernel;
  f.name = kernel.name + kChainedSuffix;
  if (!insertPrologue(f, kPrologue, "chaining", result.error)) return result;
  return finishVariant(std::move(f));
}

ModuleTransformResult addChainedKernels(const Module& module) {
  const std::string obstacle = moduleObstacle(module);
  // Eligibility for slicing does not matter here: a chained kernel runs its grid as it is.
  return addKernelVariants(
      module, kChainedSuffix,
      [&](const Eligibility& e) {
        if (!obstacle.empty()) return obstacle;
        return e.usesGridDependency ? std::string("uses programmatic dependent launch itself") : std::string();
      },
      makeChainedKernel);
}

}  // namespace tally::server::transform
