#pragma once

#include "server/scheduler/launcher.h"
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

// Pointers to each parameter's bytes inside k.paramBuffer, as cuLaunchKernel takes them: the
// ones the caller built (KernelLaunch::paramPointers), else made here.
class ParameterPointers {
 public:
  explicit ParameterPointers(const KernelLaunch& k);
  ParameterPointers(const ParameterPointers&) = delete;  // pointers_ may point into built_
  ParameterPointers& operator=(const ParameterPointers&) = delete;
  void** get() { return pointers_; }
  gpu::KernelParams kernelParams() { return {pointers_, count_}; }

 private:
  std::vector<void*> built_;
  void** pointers_;
  size_t count_;
};

class PassthroughPolicy final : public Policy {
 public:
  explicit PassthroughPolicy(Launcher& launcher) : launcher_(launcher) {}
  const char* name() const override { return "passthrough"; }
  std::optional<int> streamPriority(bool, const gpu::Gpu&) const override { return std::nullopt; }
  CUresult launch(const KernelLaunch& k) override;
  void afterWork(uint64_t, bool, uint64_t, gpu::Gpu&, CUstream) override {}
  void tenantEnding(uint64_t) override {}
  void tenantReleased(uint64_t) override {}
  std::string summary() const override { return "passthrough"; }

 private:
  Launcher& launcher_;
};

}  // namespace tally::server::scheduler
