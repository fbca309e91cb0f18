// "--transform stress" (a test aid): every launch of a kernel that has variants runs as a random
// one — the original, the sliced variant over 2-16 slices, or the PTB variant with a random
// worker count and chunk, half of the PTB launches preempted 1-3 times at random points on the
// GPU — so that the GPU suite checks that no application notices. It wraps the configured
// policy: launches without variants, and everything else, go to that one.
#pragma once

#include <memory>

#include "server/scheduler/launcher.h"
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

class StressPolicy final : public Policy {
 public:
  StressPolicy(std::unique_ptr<Policy> inner, Launcher& launcher, uint64_t seed)
      : inner_(std::move(inner)), launcher_(launcher), seed_(seed) {}

  const char* name() const override { return "stress"; }
  std::optional<int> streamPriority(bool highPriority, const gpu::Gpu& g) const override {
    return inner_->streamPriority(highPriority, g);
  }
  gpu::Placement placement(bool highPriority, gpu::Gpu& g) override { return inner_->placement(highPriority, g); }
  void observeHpWait(gpu::Gpu& g, uint64_t tenant, double micros) override {
    inner_->observeHpWait(g, tenant, micros);
  }
  unsigned smsKeptFromBestEffort(gpu::Gpu& g) override { return inner_->smsKeptFromBestEffort(g); }
  CUresult launch(const KernelLaunch& k) override;
  CUresult runOpaque(const OpaqueWork& w) override { return inner_->runOpaque(w); }
  void afterWork(uint64_t tenant, bool highPriority, uint64_t streamId, gpu::Gpu& g, CUstream stream) override {
    inner_->afterWork(tenant, highPriority, streamId, g, stream);
  }
  void endOfBurst(uint64_t tenant) override { inner_->endOfBurst(tenant); }
  void tenantEnding(uint64_t tenant) override { inner_->tenantEnding(tenant); }
  void tenantReleased(uint64_t tenant) override { inner_->tenantReleased(tenant); }
  std::string summary() const override { return "stress over " + inner_->summary(); }
  bool chainsHighPriority() const override { return inner_->chainsHighPriority(); }

 private:
  CUresult stressLaunch(const KernelLaunch& k, gpu::KernelParams params);

  std::unique_ptr<Policy> inner_;
  Launcher& launcher_;
  uint64_t seed_;
};

}  // namespace tally::server::scheduler
