#pragma once

#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

// Pointers to each parameter's bytes inside k.paramBuffer, as cuLaunchKernel takes them.
std::vector<void*> parameterPointers(const KernelLaunch& k);
// Launches k.original as it is, with its attributes if it has any; every policy's way to the GPU.
CUresult launchOriginal(const KernelLaunch& k, void** params);

class PassthroughPolicy final : public Policy {
 public:
  const char* name() const override { return "passthrough"; }
  std::optional<int> streamPriority(bool, const gpu::Gpu&) const override { return std::nullopt; }
  CUresult launch(const KernelLaunch& k) override;
  void afterWork(uint64_t, bool, uint64_t, gpu::Gpu&, CUstream) override {}
  void tenantEnding(uint64_t) override {}
  void tenantReleased(uint64_t) override {}
  std::string summary() const override { return "passthrough"; }
};

}  // namespace tally::server::scheduler
