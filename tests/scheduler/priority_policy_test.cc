// PriorityPolicy (and the stress policy) on a simulated GPU and clock (fake_launcher.h): no GPU,
// no threads. The policy's monitor is driven by hand: the fake runs one poll after each of the
// policy's own sleeps, and elapse() lets time pass as the monitor thread would see it.
#include "server/scheduler/priority_policy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <future>
#include <fstream>

#include "server/scheduler/passthrough_policy.h"
#include "server/scheduler/stress_policy.h"
#include "tests/scheduler/fake_launcher.h"

namespace tally::server::scheduler {
namespace {

using sim::FakeLauncher;
using sim::FakeLaunch;
using sim::kMicros;
using sim::LaunchKind;

CUfunction function(int i) { return reinterpret_cast<CUfunction>(uintptr_t(0x7000 + 16 * i)); }

// A kernel of a tenant's module: the original and, when the module has them, its variants.
struct Kernel {
  CUfunction original = nullptr, sliced = nullptr, ptb = nullptr;
  std::string profileKey;
  uint32_t grid = 1000;
  uint32_t block = 128;
  CUfunction chained = nullptr;  // an HP module's variant
  std::string shapeKey() const { return profileKey + "/" + std::to_string(grid) + "x1x1/" + std::to_string(block) + "x1x1/0"; }
};

struct Tenant {
  uint64_t id = 0;
  bool highPriority = false;
  CUstream stream = nullptr;
  bool mustNotHold = false;
  bool followsKernel = true;  // what the API layer saw last on the stream
  std::atomic<uint64_t> sliced{0}, ptb{0}, preemptions{0}, chained{0};
  metrics::LatencyHistogram held;
};

const std::vector<std::pair<uint32_t, uint32_t>> kNoParams;

KernelLaunch launchOf(Tenant& t, gpu::Gpu* g, const Kernel& kernel) {
  KernelLaunch k;
  k.tenant = t.id;
  k.highPriority = t.highPriority;
  k.mustNotHold = t.mustNotHold;
  k.streamId = 1;
  k.gpu = g;
  k.stream = t.stream;
  k.original = kernel.original;
  k.sliced = kernel.sliced;
  k.ptb = kernel.ptb;
  k.chained = kernel.chained;
  k.followsKernel = t.followsKernel;
  k.profileKey = &kernel.profileKey;
  k.shape.grid[0] = kernel.grid;
  k.shape.block[0] = kernel.block;
  k.paramLayout = &kNoParams;
  k.slicedLaunches = &t.sliced;
  k.ptbLaunches = &t.ptb;
  k.chainedLaunches = &t.chained;
  k.preemptions = &t.preemptions;
  k.held = &t.held;
  return k;
}

// Reserves of these sizes (SMs), with or without overlap at every level.
gpu::SmPartitionSpec spec(std::vector<unsigned> sizes, bool overlap) {
  gpu::SmPartitionSpec s;
  for (unsigned size : sizes) s.reserves.push_back({size, overlap});
  return s;
}

uint32_t word(CUdeviceptr address) { return *reinterpret_cast<const uint32_t*>(address); }
const FakeLaunch& last(const FakeLauncher& fake) { return fake.launches.back(); }

class PriorityPolicyTest : public ::testing::Test {
 protected:
  PriorityPolicyTest() {
    config.policy = "priority";
    config.idleWindowMicros = 100;
    config.budgetMicros = 100;
  }
  ~PriorityPolicyTest() override {
    policy.reset();
    std::error_code ec;
    if (!profiles.empty()) std::filesystem::remove_all(std::filesystem::path(profiles).parent_path(), ec);
  }

  void start() {
    g = fake.addGpu(gpuSpec);
    std::string error;
    policy = std::make_unique<PriorityPolicy>(config, std::vector<gpu::Gpu*>{g}, fake, fake, error, false);
    ASSERT_TRUE(error.empty()) << error;
    fake.onSleep = [this] { policy->pollOnce(); };
  }
  // Lets `d` pass as the monitor thread sees it: one look every 10 µs.
  void elapse(Nanos d) {
    for (Nanos t = 0; t < d; t += 10 * kMicros) fake.sleepFor(10 * kMicros);
  }
  // Durations the policy learned in an earlier run (its profiles file), ten samples each; with
  // `variantsToo`, its variants timed as fast as the original (they pay, and are not timed again
  // on their next launches).
  void knowDurations(const std::vector<std::pair<const Kernel*, double>>& micros, bool variantsToo = false) {
    char dir[] = "/tmp/tally-policy-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    profiles = std::string(dir) + "/kernel-durations.tsv";
    std::ofstream out(profiles);
    for (auto [k, us] : micros) {
      out << k->shapeKey() << '\t' << us << "\t10\n";
      if (variantsToo) out << k->shapeKey() << "#ptb\t" << us << "\t10\n" << k->shapeKey() << "#sliced\t" << us << "\t10\n";
    }
    config.profilesPath = profiles;
  }
  // A kernel with both variants, `micros` long, whose blocks are 2 to an SM.
  Kernel transformable(int n, Nanos duration) {
    Kernel k{function(3 * n), function(3 * n + 1), function(3 * n + 2), "mod/k" + std::to_string(n)};
    for (CUfunction f : {k.original, k.sliced, k.ptb}) fake.setKernel(f, duration);
    return k;
  }
  Tenant& tenant(uint64_t id, bool highPriority) {
    auto& t = tenants_[id];
    t = std::make_unique<Tenant>();
    t->id = id;
    t->highPriority = highPriority;
    t->stream = fake.newStream(id);
    return *t;
  }
  // One launch, then the end of the tenant's burst, as a session does when nothing else is queued.
  CUresult launch(Tenant& t, const Kernel& k) {
    CUresult r = policy->launch(launchOf(t, g, k));
    policy->endOfBurst(t.id);
    return r;
  }
  // Launches of one burst: the session has more of the tenant's launches at hand after each.
  void launchBurst(Tenant& t, const Kernel& k, int count) {
    for (int i = 0; i < count; ++i) ASSERT_EQ(policy->launch(launchOf(t, g, k)), CUDA_SUCCESS);
  }
  const FakeLaunch& last() { return fake.launches.back(); }
  // Both classes queue work now: where HP's goes.
  gpu::Placement bothActive() {
    policy->placement(false, *g);
    return policy->placement(true, *g);
  }
  // HP tenant `hp`'s synchronizing waits, `count` of `micros` each.
  void hpWaits(int count, double micros, uint64_t hp = 1) {
    for (int i = 0; i < count; ++i) policy->observeHpWait(*g, hp, micros);
  }
  std::vector<FakeLaunch> launchesOf(const Tenant& t) {
    std::vector<FakeLaunch> out;
    for (const FakeLaunch& l : fake.launches) {
      if (l.tenant == t.id) out.push_back(l);
    }
    return out;
  }

  static SchedulerConfig withGateAndTransforms() {
    SchedulerConfig c;
    c.gate = true;
    c.transforms = true;
    return c;
  }

  FakeLauncher fake;  // outlives the policy
  sim::FakeGpuSpec gpuSpec;
  gpu::Gpu* g = nullptr;  // start() adds it
  SchedulerConfig config = withGateAndTransforms();  // what most tests here are about
  std::string profiles;
  std::unique_ptr<PriorityPolicy> policy;

 private:
  std::map<uint64_t, std::unique_ptr<Tenant>> tenants_;
};

// ---- the gate -----------------------------------------------------------------------------------

TEST_F(PriorityPolicyTest, BestEffortWaitsUntilHpHasBeenIdleForTheWindow) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  Kernel beKernel{function(2), nullptr, nullptr, "be/k"};
  fake.setKernel(hpKernel.original, 50 * kMicros);
  ASSERT_EQ(launch(hp, hpKernel), CUDA_SUCCESS);
  ASSERT_EQ(launch(be, beKernel), CUDA_SUCCESS);  // holds this thread on the simulated clock
  // HP ran 0-50 µs; idle from 50 µs, the window of 100 µs ends at 150 µs.
  const FakeLaunch& l = last();
  EXPECT_EQ(l.tenant, be.id);
  EXPECT_GE(l.queued, 150 * kMicros);
  EXPECT_LE(l.queued, 160 * kMicros);
  EXPECT_EQ(be.held.count(), 1u);
  EXPECT_GE(be.held.totalMicros(), 150u);
}

TEST_F(PriorityPolicyTest, AnHpBurstGetsOneCompletionMarkAfterItsLastKernel) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 50 * kMicros);
  launchBurst(hp, hpKernel, 5);
  EXPECT_TRUE(fake.writes.empty());  // deferred to the end of the burst
  policy->endOfBurst(hp.id);
  ASSERT_EQ(fake.writes.size(), 1u);
  EXPECT_EQ(fake.writes.back().first, hp.stream);
  // HP runs 0-250 µs; the window of 100 µs after it ends at 350 µs.
  ASSERT_EQ(launch(be, Kernel{function(2), nullptr, nullptr, "be/k"}), CUDA_SUCCESS);
  EXPECT_EQ(last().tenant, be.id);
  EXPECT_GE(last().queued, 350 * kMicros);
  EXPECT_LE(last().queued, 360 * kMicros);
}

// The stress policy wraps the priority policy in the GPU suite's stress runs: the end of a burst
// must reach it, or the marks are written late by the monitor, on streams the tenant may have
// destroyed by then (tallyd crashed so in the H200's stress suite).
TEST_F(PriorityPolicyTest, TheStressPolicyPassesTheEndOfABurstOn) {
  start();
  Tenant& hp = tenant(1, true);
  std::string error;
  StressPolicy stress(std::make_unique<PriorityPolicy>(config, std::vector<gpu::Gpu*>{g}, fake, fake, error, false),
                      fake, 1);
  ASSERT_TRUE(error.empty()) << error;
  stress.afterWork(hp.id, true, 1, *g, hp.stream);
  EXPECT_TRUE(fake.writes.empty());  // deferred to the end of the burst
  stress.endOfBurst(hp.id);
  ASSERT_EQ(fake.writes.size(), 1u);
  EXPECT_EQ(fake.writes.back().first, hp.stream);
}

TEST_F(PriorityPolicyTest, HpWorkWhoseMarkIsNeverFlushedStillEndsTheHold) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 50 * kMicros);
  launchBurst(hp, hpKernel, 1);  // the tenant's thread never gets to endOfBurst
  ASSERT_EQ(launch(be, Kernel{function(2), nullptr, nullptr, "be/k"}), CUDA_SUCCESS);
  // HP counts as busy until the monitor writes the stale mark at 200 µs; open 100 µs later.
  ASSERT_EQ(fake.writes.size(), 1u);
  EXPECT_GE(last().queued, 300 * kMicros);
  EXPECT_LE(last().queued, 320 * kMicros);
}

TEST_F(PriorityPolicyTest, AnHpStreamThatMovedGetsItsOldMarkBeforeNewWork) {
  start();
  Tenant& hp = tenant(1, true);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  launchBurst(hp, hpKernel, 2);
  CUstream before = hp.stream;
  hp.stream = fake.newStream(hp.id);  // the same tenant stream, now on another driver stream
  launchBurst(hp, hpKernel, 1);
  ASSERT_EQ(fake.writes.size(), 1u);
  EXPECT_EQ(fake.writes[0].first, before);
  policy->endOfBurst(hp.id);
  ASSERT_EQ(fake.writes.size(), 2u);
  EXPECT_EQ(fake.writes[1].first, hp.stream);
  EXPECT_EQ(fake.writes[0].second, fake.writes[1].second);  // one slot, one word
}

TEST_F(PriorityPolicyTest, AnHpLaunchDoesNotWaitForABestEffortOccupancyQuery) {
  // The first occupancy query of a kernel may load it lazily and wait for every running kernel;
  // an HP launch meanwhile must not wait for the policy's lock.
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  std::future<CUresult> hpLaunch;
  bool hpLaunchedDuringQuery = false;
  fake.onOccupancyQuery = [&] {
    if (hpLaunch.valid()) return;
    hpLaunch = std::async(std::launch::async, [&] { return launch(hp, hpKernel); });
    hpLaunchedDuringQuery = hpLaunch.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  };
  ASSERT_EQ(launch(be, Kernel{function(2), nullptr, nullptr, "be/k"}), CUDA_SUCCESS);
  ASSERT_TRUE(hpLaunch.valid());
  EXPECT_EQ(hpLaunch.get(), CUDA_SUCCESS);  // if it was held, it got the lock after the query
  EXPECT_TRUE(hpLaunchedDuringQuery);
  EXPECT_EQ(launchesOf(hp).size(), 1u);
}

// The defaults (stream priorities, and partitions when configured): a BE launch is the original
// at once, with nothing timed and no occupancy asked.
TEST_F(PriorityPolicyTest, WithoutGateAndTransformsABestEffortLaunchIsTheOriginalAtOnce) {
  config = SchedulerConfig{};
  config.policy = "priority";
  start();
  bool asked = false;
  fake.onOccupancyQuery = [&] { asked = true; };
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel longKernel = transformable(3, 10'000 * kMicros);
  launch(hp, Kernel{function(1), nullptr, nullptr, "hp/k"});
  launch(be, longKernel);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
  EXPECT_EQ(last().queued, fake.now()) << "not held while HP runs";
  EXPECT_FALSE(asked);
  EXPECT_EQ(fake.liveEvents(), 0u) << "nothing timed";
  policy->afterWork(hp.id, true, 1, *g, hp.stream);
  policy->endOfBurst(hp.id);
  elapse(1000 * kMicros);
  EXPECT_TRUE(fake.writes.empty()) << "nothing waits for HP to go idle: its work is not marked";
}

TEST_F(PriorityPolicyTest, WithoutTheGateNothingIsHeld) {
  config.gate = false;
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  Kernel beKernel{function(2), nullptr, nullptr, "be/k"};
  fake.setKernel(hpKernel.original, 50 * kMicros);
  launch(hp, hpKernel);
  for (int i = 0; i < 5; ++i) launch(be, beKernel);  // no in-flight limit either
  for (const FakeLaunch& l : launchesOf(be)) EXPECT_EQ(l.queued, 0);
  EXPECT_EQ(launchesOf(be).size(), 5u);
  EXPECT_EQ(be.held.count(), 0u);
}

TEST_F(PriorityPolicyTest, HpStreamWorkOtherThanKernelsKeepsHpBusy) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  Kernel beKernel{function(2), nullptr, nullptr, "be/k"};
  fake.setKernel(hpKernel.original, 300 * kMicros);
  launch(hp, hpKernel);
  elapse(400 * kMicros);  // HP done at 300, the gate open again at 400
  policy->afterWork(hp.id, true, 1, *g, hp.stream);  // a copy: closes the gate, done at once
  launch(be, beKernel);
  EXPECT_GE(last().queued, 500 * kMicros);  // the copy's idle window
}

TEST_F(PriorityPolicyTest, HpLaunchClosesTheGateAndRaisesTheRetreatFlagOfRunningPtbKernels) {
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  knowDurations({{&longKernel, 10'000}});
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  ASSERT_EQ(launch(be, longKernel), CUDA_SUCCESS);
  const FakeLaunch ptb = last();
  ASSERT_EQ(ptb.kind, LaunchKind::kPtbResumable);
  EXPECT_EQ(word(ptb.control.retreat), 0u);
  Kernel hpKernel{function(50), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 50 * kMicros);
  launch(hp, hpKernel);
  EXPECT_EQ(word(ptb.control.retreat), 1u);  // the PTB workers stop after their chunk
  EXPECT_EQ(word(ptb.neverRetreat), 0u);     // the last run still completes the grid
  elapse(140 * kMicros);
  EXPECT_EQ(word(ptb.control.retreat), 1u);  // idle only since 50 µs
  elapse(20 * kMicros);
  EXPECT_EQ(word(ptb.control.retreat), 0u);  // the window has passed: the kernel resumes
}

TEST_F(PriorityPolicyTest, LaunchesThatMustNotBeHeldPassTheClosedGate) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  be.mustNotHold = true;
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 1000 * kMicros);
  launch(hp, hpKernel);
  launch(be, Kernel{function(2), nullptr, nullptr, "be/k"});
  EXPECT_EQ(last().tenant, be.id);
  EXPECT_EQ(last().queued, 0);
}

TEST_F(PriorityPolicyTest, KernelsOfTinyBlocksRunBesideHp) {
  Kernel tiny{function(2), nullptr, function(3), "be/tiny"};
  fake.setKernel(tiny.original, 5 * kMicros);  // 1000 blocks in ~4 waves: ~1.3 µs a block
  fake.setKernel(tiny.ptb, 5 * kMicros);
  knowDurations({{&tiny, 5}});
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 1000 * kMicros);
  launch(hp, hpKernel);
  launch(be, tiny);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
  EXPECT_EQ(last().queued, 0);
}

// ---- variants -----------------------------------------------------------------------------------

TEST_F(PriorityPolicyTest, LongKernelsRunAsPtbOrSlicesAndShortOnesAsTheOriginal) {
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  Kernel medium = transformable(2, 300 * kMicros);
  Kernel shortKernel = transformable(3, 50 * kMicros);
  knowDurations({{&longKernel, 10'000}, {&medium, 300}, {&shortKernel, 50}});
  start();
  Tenant& be = tenant(2, false);

  launch(be, longKernel);  // >= 5 budgets: PTB, one wave of workers (2 blocks x 132 SMs)
  ASSERT_EQ(last().kind, LaunchKind::kPtbResumable);
  EXPECT_EQ(last().function, longKernel.ptb);
  EXPECT_EQ(last().workers.workers, 264u);
  EXPECT_EQ(last().workers.chunk, 1u);  // a block takes ~2.6 ms: one per claim
  EXPECT_NE(last().control.progress, 0u);
  EXPECT_EQ(be.ptb.load(), 1u);
  elapse(10'000 * kMicros);

  const size_t before = fake.launches.size();
  launch(be, medium);  // 3 budgets: ceil(300 / 100) slices
  ASSERT_EQ(fake.launches.size(), before + 3);
  uint64_t blocks = 0;
  for (size_t i = before; i < fake.launches.size(); ++i) {
    EXPECT_EQ(fake.launches[i].kind, LaunchKind::kSliceRange);
    EXPECT_EQ(fake.launches[i].function, medium.sliced);
    blocks += fake.launches[i].blocks;
  }
  EXPECT_EQ(blocks, 1000u);
  EXPECT_EQ(be.sliced.load(), 1u);
  elapse(1000 * kMicros);

  launch(be, shortKernel);  // within the budget: waiting for it costs no more
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
  EXPECT_EQ(last().function, shortKernel.original);
}

TEST_F(PriorityPolicyTest, UnknownKernelsAreTimedFirstThenTransformed) {
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  start();
  Tenant& be = tenant(2, false);
  for (int i = 0; i < 3; ++i) {
    launch(be, longKernel);
    EXPECT_EQ(last().kind, LaunchKind::kOriginal) << "launch " << i;
    elapse(10'100 * kMicros);  // done, and its timing read by the monitor
  }
  EXPECT_NE(policy->summary().find("3 timed"), std::string::npos) << policy->summary();
  launch(be, longKernel);
  EXPECT_EQ(last().kind, LaunchKind::kPtbResumable);
}

TEST_F(PriorityPolicyTest, VariantsMuchSlowerThanTheOriginalGiveWayToIt) {
  Kernel kernel = transformable(1, 1'000 * kMicros);  // 10 budgets: PTB while it pays
  fake.setKernel(kernel.ptb, 8'000 * kMicros);        // as PTB it takes 8x as long
  fake.setKernel(kernel.sliced, 4'000 * kMicros);     // as slices 4x
  knowDurations({{&kernel, 1'000}});
  start();
  Tenant& be = tenant(2, false);
  auto runOnce = [&](Nanos lasts) {
    launch(be, kernel);
    elapse(lasts + 100 * kMicros);  // done, and its timing read by the monitor
  };
  for (int i = 0; i < 3; ++i) {
    runOnce(8'000 * kMicros);
    EXPECT_EQ(last().kind, LaunchKind::kPtbResumable) << "launch " << i;
  }
  for (int i = 0; i < 3; ++i) {  // PTB did not pay: slices, timed as well
    runOnce(4'000 * kMicros);
    EXPECT_EQ(last().kind, LaunchKind::kSliceRange) << "launch " << i;
  }
  runOnce(1'000 * kMicros);  // neither pays
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
  EXPECT_EQ(last().function, kernel.original);
  EXPECT_NE(policy->summary().find("2 variants that did not pay"), std::string::npos) << policy->summary();
}

TEST_F(PriorityPolicyTest, AVariantAsFastAsTheOriginalKeepsRunning) {
  Kernel kernel = transformable(1, 1'000 * kMicros);  // every variant as fast as the original
  knowDurations({{&kernel, 1'000}});
  start();
  Tenant& be = tenant(2, false);
  for (int i = 0; i < 5; ++i) {
    launch(be, kernel);
    EXPECT_EQ(last().kind, LaunchKind::kPtbResumable) << "launch " << i;
    elapse(1'100 * kMicros);
  }
  EXPECT_NE(policy->summary().find("0 variants that did not pay"), std::string::npos) << policy->summary();
}

TEST_F(PriorityPolicyTest, WithoutTransformsEverythingRunsAsTheOriginal) {
  config.transforms = false;
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  knowDurations({{&longKernel, 10'000}});
  start();
  Tenant& be = tenant(2, false);
  launch(be, longKernel);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
}

TEST_F(PriorityPolicyTest, NoPtbWithoutTheGpusHelpers) {
  gpuSpec.ptbHelpers = false;
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  knowDurations({{&longKernel, 10'000}});
  start();
  Tenant& be = tenant(2, false);
  launch(be, longKernel);
  // ceil(10 ms / 100 µs) slices, at most 64: slices of ceil(1000 / 64) = 16 blocks.
  EXPECT_EQ(fake.launches.size(), 63u);
  for (const FakeLaunch& l : fake.launches) EXPECT_EQ(l.kind, LaunchKind::kSliceRange);
}

// ---- a tenant's kernels in flight ---------------------------------------------------------------

TEST_F(PriorityPolicyTest, AtMostTwoBestEffortKernelsOfATenantAreInFlight) {
  start();
  Tenant& be = tenant(2, false);
  Kernel k{function(2), nullptr, nullptr, "be/k"};
  fake.setKernel(k.original, 100 * kMicros);
  for (int i = 0; i < 3; ++i) launch(be, k);
  auto l = launchesOf(be);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].queued, 0);
  EXPECT_EQ(l[1].queued, 0);
  EXPECT_EQ(l[2].queued, 100 * kMicros);  // once the first is done
  // Another tenant has its own two.
  Tenant& other = tenant(3, false);
  launch(other, k);
  EXPECT_EQ(last().queued, 100 * kMicros);
}

TEST_F(PriorityPolicyTest, WaitingForKernelsInFlightIsBoundedToAMillisecond) {
  start();
  Tenant& be = tenant(2, false);
  Kernel k{function(2), nullptr, nullptr, "be/k"};
  fake.setKernel(k.original, 5000 * kMicros);
  for (int i = 0; i < 3; ++i) launch(be, k);
  EXPECT_EQ(launchesOf(be)[2].queued, 1000 * kMicros);  // not 5 ms: the kernel may wait for this tenant
}

// ---- opaque work --------------------------------------------------------------------------------

TEST_F(PriorityPolicyTest, OpaqueWorkIsGatedLikeAKernel) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  Nanos issued = -1;
  OpaqueWork hpWork{hp.id, true, false, g, [&](CUstream& used) {
                      used = hp.stream;
                      return CUDA_SUCCESS;
                    }};
  ASSERT_EQ(policy->runOpaque(hpWork), CUDA_SUCCESS);
  policy->afterWork(hp.id, true, 1, *g, hp.stream);  // as the API layer does after it
  OpaqueWork beWork{be.id, false, false, g, [&](CUstream& used) {
                      used = be.stream;
                      issued = fake.now();
                      return CUDA_SUCCESS;
                    }, &be.held};
  ASSERT_EQ(policy->runOpaque(beWork), CUDA_SUCCESS);
  EXPECT_GE(issued, 100 * kMicros);  // the HP work's idle window
  EXPECT_EQ(be.held.count(), 1u);
}

// ---- chained HP kernels -------------------------------------------------------------------------

class ChainingTest : public PriorityPolicyTest {
 protected:
  ChainingTest() {
    config = SchedulerConfig{};  // the shipped defaults: chaining while best-effort work is about
    config.policy = "priority";
  }
  Kernel hpKernel() {
    Kernel k{function(1), nullptr, nullptr, "hp/k"};
    k.chained = function(4);
    return k;
  }
  void bestEffortLaunch() {
    if (be_ == nullptr) be_ = &tenant(2, false);
    launch(*be_, Kernel{function(2), nullptr, nullptr, "be/k"});
  }
  // An HP tenant next to a BE one, a 40-SM overlapped reserve configured; its first launch made.
  Tenant& hpBesideBestEffortAtTheReserve() {
    config.smPartition = spec({40}, true);
    start();
    Tenant& hp = tenant(1, true);
    bestEffortLaunch();
    EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "starts at the reserve";
    launch(hp, hpKernel());
    EXPECT_EQ(last().kind, LaunchKind::kChained);
    return hp;
  }

 private:
  Tenant* be_ = nullptr;
};

TEST_F(ChainingTest, HpKernelsRunChainedOnlyWhileBestEffortWorkIsAbout) {
  start();
  EXPECT_TRUE(policy->chainsHighPriority());
  Tenant& hp = tenant(1, true);
  const Kernel k = hpKernel();
  launch(hp, k);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal) << "alone, chaining only costs HP";
  bestEffortLaunch();
  launch(hp, k);
  EXPECT_EQ(last().kind, LaunchKind::kChained);
  EXPECT_EQ(last().function, k.chained);
  fake.sleepFor(150'000 * kMicros);
  launch(hp, k);
  EXPECT_EQ(last().kind, LaunchKind::kChained) << "a training job's pause between launches";
  fake.sleepFor(300'000 * kMicros);
  launch(hp, k);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal) << "best-effort work has been gone for 0.3 s";
  EXPECT_NE(policy->summary().find("2 HP launches chained"), std::string::npos) << policy->summary();
  EXPECT_EQ(hp.chained.load(), 2u) << "the tenant's own count (tallyctl stats, metrics)";
}

TEST_F(ChainingTest, OnlyALaunchThatFollowsAKernelOnItsStreamOverlapsIt) {
  start();
  Tenant& hp = tenant(1, true);
  bestEffortLaunch();
  hp.followsKernel = false;  // a copy, an event wait or a library call came before it
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kChained) << "its signal lets the next kernel be queued early";
  EXPECT_FALSE(last().overlapsPrevious);
  hp.followsKernel = true;
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kChained);
  EXPECT_TRUE(last().overlapsPrevious);
  Kernel plain{function(1), nullptr, nullptr, "hp/k"};  // no PTX for sm_90: no variant
  launch(hp, plain);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
}

TEST_F(ChainingTest, BestEffortLibraryWorkCountsAsBestEffortWork) {
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  OpaqueWork gemm{be.id, false, false, g, [&](CUstream& used) {
                    used = be.stream;
                    return CUDA_SUCCESS;
                  }};
  ASSERT_EQ(policy->runOpaque(gemm), CUDA_SUCCESS);
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kChained);
}

TEST_F(ChainingTest, OffNeverChainsAndAlwaysChainsEvenAlone) {
  config.hpChain = SchedulerConfig::HpChain::kOff;
  start();
  EXPECT_FALSE(policy->chainsHighPriority()) << "HP tenants then load no chained variants";
  Tenant& hp = tenant(1, true);
  bestEffortLaunch();
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);

  policy.reset();
  config.hpChain = SchedulerConfig::HpChain::kAlways;
  start();
  Tenant& alone = tenant(3, true);
  launch(alone, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kChained);
}

// Under a budget, the ladder's lowest rung is sharing every SM with HP unchained: where HP meets
// the budget without chaining, BE keeps the SMs chained blocks would hold while they wait.
TEST_F(ChainingTest, ABudgetMetWithoutChainingLeavesHpKernelsUnchained) {
  config.hpP99Budget.micros = 1000;
  Tenant& hp = hpBesideBestEffortAtTheReserve();
  for (int i = 0; i < 3000; ++i) {  // within the budget everywhere: walks down to the lowest rung
    bothActive();
    policy->observeHpWait(*g, hp.id, 500);
  }
  EXPECT_EQ(bothActive(), gpu::Placement::wholeGpu());
  bestEffortLaunch();
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kOriginal) << "within the budget with every SM shared and HP unchained";
  hpWaits(200, 3000, hp.id);
  bestEffortLaunch();
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kChained) << "over the budget: back up the ladder, chained again";
}

TEST_F(ChainingTest, WithoutABudgetTheLadderHasNoUnchainedRung) {
  Tenant& hp = hpBesideBestEffortAtTheReserve();
  hpWaits(3000, 500, hp.id);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "the configured reserve: no controller";
  bestEffortLaunch();
  launch(hp, hpKernel());
  EXPECT_EQ(last().kind, LaunchKind::kChained);
}

TEST(HpChainNames, ParseWhatTheyPrint) {
  using HpChain = SchedulerConfig::HpChain;
  for (HpChain c : {HpChain::kOff, HpChain::kWhileBestEffort, HpChain::kAlways}) {
    EXPECT_EQ(parseHpChain(hpChainName(c)), c);
  }
  EXPECT_EQ(parseHpChain("auto"), HpChain::kWhileBestEffort);
  EXPECT_FALSE(parseHpChain("on"));
  EXPECT_FALSE(parseHpChain(""));
}

// ---- SM partitions ------------------------------------------------------------------------------

TEST_F(PriorityPolicyTest, WhileTheGpuIsSplitBestEffortIsNeitherHeldNorTransformed) {
  config.smPartition = spec({40}, false);
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  knowDurations({{&longKernel, 10'000}});
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  EXPECT_EQ(policy->placement(false, *g), gpu::Placement::wholeGpu());  // BE alone: every SM
  EXPECT_EQ(policy->placement(true, *g), gpu::Placement::hp(0));
  EXPECT_EQ(policy->placement(false, *g), gpu::Placement::be(0));
  Kernel hpKernel{function(50), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 1000 * kMicros);
  launch(hp, hpKernel);
  launch(be, longKernel);
  EXPECT_EQ(last().kind, LaunchKind::kOriginal);
  EXPECT_EQ(last().queued, 0);
  EXPECT_NE(policy->summary().find("1 in the BE partition"), std::string::npos) << policy->summary();
}

TEST_F(PriorityPolicyTest, ThePartitionGateAblationKeepsGatingWhileSplit) {
  config.smPartition = spec({40}, false);
  config.partitionGate = true;
  start();
  Tenant& hp = tenant(1, true);
  Tenant& be = tenant(2, false);
  policy->placement(false, *g);
  policy->placement(true, *g);
  Kernel hpKernel{function(50), nullptr, nullptr, "hp/k"};
  fake.setKernel(hpKernel.original, 50 * kMicros);
  launch(hp, hpKernel);
  launch(be, Kernel{function(2), nullptr, nullptr, "be/k"});
  EXPECT_GE(last().queued, 150 * kMicros);
}

// With the controller, the policy shares every SM once HP's waits show that sharing serves HP
// as well as splitting, and splits again when they stop doing so. Default knobs: windows of 200
// waits, the first probe after 600 split waits.
TEST_F(PriorityPolicyTest, TheControllerSharesWhileSharingServesHpAsWell) {
  config.smPartition = spec({40}, false);
  config.partitionControl = true;
  start();
  ASSERT_EQ(bothActive(), gpu::Placement::hp(0));  // starts split
  EXPECT_EQ(policy->smsKeptFromBestEffort(*g), 40u);
  hpWaits(600, 400);
  EXPECT_EQ(bothActive(), gpu::Placement::wholeGpu()) << "probing sharing";
  EXPECT_EQ(policy->smsKeptFromBestEffort(*g), 0u);
  hpWaits(200, 300);
  EXPECT_EQ(bothActive(), gpu::Placement::wholeGpu()) << "sharing served HP better: kept";
  hpWaits(200, 5000);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "sharing started to hurt HP: split again";
  EXPECT_EQ(policy->placement(false, *g), gpu::Placement::be(0));
}

// A budget alone turns the control on: from the largest reserve the policy steps down to the
// smallest one whose HP p99 is within it, and back up when HP's waits leave it.
TEST_F(PriorityPolicyTest, WithABudgetThePolicyUsesTheSmallestReserveThatMeetsIt) {
  config.smPartition = spec({24, 40}, true);
  config.hpP99Budget.micros = 1000;
  start();
  ASSERT_EQ(bothActive(), gpu::Placement::hp(1)) << "starts at the larger reserve";
  EXPECT_EQ(policy->placement(false, *g), gpu::Placement::be(1));
  hpWaits(600, 600);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "within the budget: the smaller reserve is tried";
  hpWaits(200, 800);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "still within it: kept";
  hpWaits(200, 3000);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(1)) << "over the budget: the larger reserve again";
}

// A budget relative to HP alone: HP's waits with no BE active say what alone is; until then
// the policy keeps the largest reserve. What it learned is kept for the next start.
TEST_F(PriorityPolicyTest, ARelativeBudgetIsRelativeToHpAloneLearnedAndKept) {
  knowDurations({});
  config.smPartition = spec({24, 40}, true);
  config.hpP99Budget.factor = 2;
  start();
  ASSERT_EQ(bothActive(), gpu::Placement::hp(1));
  hpWaits(1000, 500);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(1)) << "HP alone not known yet: the safe reserve";
  elapse(300'000 * kMicros);  // BE idle past the partition idle window
  policy->placement(true, *g);
  hpWaits(200, 300);  // HP alone: p99 300 µs
  for (int i = 0; i < 600; ++i) {
    bothActive();
    policy->observeHpWait(*g, 1, 500);  // within 2 x 300
  }
  EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "within the budget: the smaller reserve";

  policy.reset();  // keeps what it learned
  start();
  bothActive();
  hpWaits(600, 500);
  EXPECT_EQ(bothActive(), gpu::Placement::hp(0)) << "HP alone known from the last run";
}

TEST_F(PriorityPolicyTest, TheLevelAPairSettledOnIsWhereTheNextStartProbesFirst) {
  knowDurations({});
  config.smPartition = spec({24, 40, 64}, false);
  config.hpP99Budget.micros = 1000;
  start();
  ASSERT_EQ(bothActive(), gpu::Placement::hp(2));
  for (int i = 0; i < 3000; ++i) {  // within the budget everywhere: walks down to sharing every SM
    bothActive();
    policy->observeHpWait(*g, 1, 500);
  }
  ASSERT_EQ(bothActive(), gpu::Placement::wholeGpu());

  policy.reset();  // keeps the level it settled on
  start();
  ASSERT_EQ(bothActive(), gpu::Placement::hp(2)) << "a new start is on the safe side";
  hpWaits(200, 500);
  EXPECT_EQ(bothActive(), gpu::Placement::wholeGpu()) << "one window later: straight to the level kept";
}

// Two HP tenants: one of short requests, one of long. Against the GPU's HP alone (the long
// tenant's tail) the short tenant's tripled waits would pass a 2x budget; against its own they
// do not.
TEST_F(PriorityPolicyTest, ARelativeBudgetHoldsEachHpTenantToItsOwnWaitsAlone) {
  config.smPartition = spec({24, 40}, true);
  config.hpP99Budget.factor = 2;
  start();
  for (int i = 0; i < 200; ++i) {  // alone: the short tenant waits 300 µs, the long one 3 ms
    hpWaits(1, 300, 1);
    hpWaits(1, 3000, 2);
  }
  for (int i = 0; i < 600; ++i) {  // with BE, at the larger reserve: both within 2x
    bothActive();
    hpWaits(1, 500, 1);
  }
  ASSERT_EQ(bothActive(), gpu::Placement::hp(0)) << "the smaller reserve is tried";
  for (int i = 0; i < 200; ++i) {
    bothActive();
    hpWaits(1, 900, 1);  // 3x the short tenant's alone, far within 2x the GPU's (3 ms)
  }
  EXPECT_EQ(bothActive(), gpu::Placement::hp(1)) << "held to its own: the larger reserve again";
}

TEST_F(PriorityPolicyTest, HpWaitsWithoutBestEffortTeachTheControllerNothing) {
  config.smPartition = spec({40}, false);
  config.partitionControl = true;
  start();
  policy->placement(true, *g);  // HP alone
  hpWaits(5000, 400);
  policy->placement(false, *g);
  EXPECT_EQ(policy->placement(true, *g), gpu::Placement::hp(0)) << "still the safe start: split";
}

TEST_F(PriorityPolicyTest, StreamPrioritiesComeFromTheGpu) {
  start();
  EXPECT_EQ(policy->streamPriority(true, *g), -5);
  EXPECT_EQ(policy->streamPriority(false, *g), 0);
}

// ---- tenants ending -----------------------------------------------------------------------------

TEST_F(PriorityPolicyTest, EndedTenantsGiveBackTheirLaneAndWordsOnceReleased) {
  Kernel longKernel = transformable(1, 10'000 * kMicros);
  knowDurations({{&longKernel, 10'000}}, true);  // no timing events: only the ones in flight count
  start();
  Tenant& first = tenant(2, false);
  launch(first, longKernel);
  const gpu::PtbControl firstControl = last().control;
  const size_t eventsBefore = fake.liveEvents();

  policy->tenantEnding(first.id);
  EXPECT_EQ(fake.liveEvents(), eventsBefore);  // its stream still drains: nothing freed yet
  Tenant& second = tenant(3, false);
  launch(second, longKernel);
  EXPECT_NE(last().control.progress, firstControl.progress);
  EXPECT_NE(last().control.retreat, firstControl.retreat);
  EXPECT_EQ(fake.liveEvents(), eventsBefore + 1);  // the second's kernel in flight

  policy->tenantReleased(first.id);
  EXPECT_EQ(fake.liveEvents(), eventsBefore);  // the first's in-flight event is gone
  Tenant& third = tenant(4, false);
  launch(third, longKernel);
  EXPECT_EQ(last().control.progress, firstControl.progress);  // the first's slot, reused
  EXPECT_EQ(last().control.retreat, firstControl.retreat);

  for (const Tenant* t : {&second, &third}) {
    policy->tenantEnding(t->id);
    policy->tenantReleased(t->id);
  }
  policy.reset();
  EXPECT_EQ(fake.liveEvents(), 0u);
  EXPECT_EQ(fake.badDestroys(), 0u);
  EXPECT_EQ(fake.allocations(), 0u);  // words and progress counters freed
}

TEST_F(PriorityPolicyTest, ReleasedHpTenantsGiveBackTheirCompletionWords) {
  start();
  Tenant& first = tenant(1, true);
  Kernel hpKernel{function(1), nullptr, nullptr, "hp/k"};
  launch(first, hpKernel);
  ASSERT_FALSE(fake.writes.empty());
  const CUdeviceptr firstWord = fake.writes.back().second;
  Tenant& second = tenant(2, true);
  launch(second, hpKernel);
  EXPECT_NE(fake.writes.back().second, firstWord);
  policy->tenantEnding(first.id);
  policy->tenantReleased(first.id);
  Tenant& third = tenant(3, true);
  launch(third, hpKernel);
  EXPECT_EQ(fake.writes.back().second, firstWord);
}

// ---- the stress policy --------------------------------------------------------------------------

TEST(StressPolicy, RunsKernelsWithVariantsAsRandomVariantsAndTheRestThroughItsPolicy) {
  FakeLauncher fake;
  gpu::Gpu* g = fake.addGpu();
  StressPolicy policy(std::make_unique<PassthroughPolicy>(fake), fake, 42);
  Tenant t;
  t.id = 7;
  t.stream = fake.newStream(t.id);
  Kernel withVariants{function(1), function(2), function(3), "mod/k"};
  for (CUfunction f : {withVariants.original, withVariants.sliced, withVariants.ptb}) fake.setKernel(f, kMicros);
  CUstream side = fake.newStream(t.id);
  CUdeviceptr control = 0;
  fake.allocDevice(16, control);
  int prepared = 0;
  std::map<LaunchKind, int> kinds;
  for (int i = 0; i < 400; ++i) {
    KernelLaunch k = launchOf(t, g, withVariants);
    k.variantStreams = [&](CUstream& s, CUdeviceptr& c) {
      ++prepared;
      s = side;
      c = control;
      return true;
    };
    ASSERT_EQ(policy.launch(k), CUDA_SUCCESS);
    ++kinds[last(fake).kind];
    if (last(fake).kind == LaunchKind::kPtb || last(fake).kind == LaunchKind::kPtbPreempted) {
      EXPECT_EQ(last(fake).control.progress, control);
      EXPECT_EQ(last(fake).control.retreat, control + 8);
    }
  }
  EXPECT_GT(kinds[LaunchKind::kOriginal], 0);
  EXPECT_GT(kinds[LaunchKind::kSliced], 0);
  EXPECT_GT(kinds[LaunchKind::kPtb], 0);
  EXPECT_GT(kinds[LaunchKind::kPtbPreempted], 0);
  EXPECT_EQ(uint64_t(kinds[LaunchKind::kSliced]), t.sliced.load());
  EXPECT_EQ(uint64_t(kinds[LaunchKind::kPtb] + kinds[LaunchKind::kPtbPreempted]), t.ptb.load());
  EXPECT_EQ(prepared, kinds[LaunchKind::kPtb] + kinds[LaunchKind::kPtbPreempted]);

  // No variants, or attributes (cooperative, clusters): the original, through the wrapped policy.
  Kernel noVariants{function(9), nullptr, nullptr, "mod/plain"};
  KernelLaunch plain = launchOf(t, g, noVariants);
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  KernelLaunch withAttributes = launchOf(t, g, withVariants);
  withAttributes.attributes = std::span<const CUlaunchAttribute>(&cooperative, 1);
  for (int i = 0; i < 20; ++i) {
    policy.launch(plain);
    EXPECT_EQ(last(fake).kind, LaunchKind::kOriginal);
    policy.launch(withAttributes);
    EXPECT_EQ(last(fake).kind, LaunchKind::kOriginal);
    EXPECT_EQ(last(fake).attributes, 1u);
  }
}

}  // namespace
}  // namespace tally::server::scheduler
