#pragma once

#include "server/scheduler/launcher.h"
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

class PassthroughPolicy final : public Policy {
 public:
  explicit PassthroughPolicy(Launcher& launcher) : launcher_(launcher) {}
  const char* name() const override { return "passthrough"; }
  std::optional<int> streamPriority(bool, const gpu::Gpu&) const override { return std::nullopt; }
  gpu::Placement placement(bool, gpu::Gpu&) override { return gpu::Placement::wholeGpu(); }
  void observeHpWait(gpu::Gpu&, uint64_t, double) override {}
  unsigned smsKeptFromBestEffort(gpu::Gpu&) override { return 0; }
  CUresult launch(const KernelLaunch& k) override;
  CUresult runOpaque(const OpaqueWork& w) override {
    CUstream used = nullptr;
    return w.enqueue(used);
  }
  void afterWork(uint64_t, bool, uint64_t, gpu::Gpu&, CUstream) override {}
  void endOfBurst(uint64_t) override {}
  void tenantEnding(uint64_t) override {}
  void tenantReleased(uint64_t) override {}
  std::string summary() const override { return "passthrough"; }
  bool chainsHighPriority() const override { return false; }

 private:
  Launcher& launcher_;
};

}  // namespace tally::server::scheduler
