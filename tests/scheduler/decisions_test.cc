// The priority policy's decisions on a simulated clock and device (no GPU): gating, variant
// choice under a budget, learned durations, PTB preemption/resume bookkeeping, a tenant's order
// and cleanup when it disconnects mid-preemption.
#include "server/scheduler/decisions.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tally::server::scheduler {
namespace {

constexpr Nanos kUs = 1000;

TEST(HpActivity, GateClosesOnSubmitAndOpensAfterTheIdleWindow) {
  HpActivity a(100 * kUs);
  EXPECT_TRUE(a.gateOpen());
  EXPECT_TRUE(a.submitted(0));    // was open: the caller closes it
  EXPECT_FALSE(a.submitted(5));   // already closed
  EXPECT_FALSE(a.gateOpen());
  EXPECT_FALSE(a.observe(50 * kUs, true));    // HP still running
  EXPECT_FALSE(a.observe(60 * kUs, false));   // idle from now on ...
  EXPECT_FALSE(a.observe(159 * kUs, false));  // ... but not for the whole window yet
  EXPECT_TRUE(a.observe(160 * kUs, false));
  EXPECT_TRUE(a.gateOpen());
  EXPECT_FALSE(a.observe(170 * kUs, false));  // opens once
}

TEST(HpActivity, NewHpWorkRestartsTheIdleWindow) {
  HpActivity a(100 * kUs);
  a.submitted(0);
  a.observe(10 * kUs, false);
  a.submitted(80 * kUs);                       // more HP work before the window ended
  EXPECT_FALSE(a.observe(150 * kUs, false));  // idle only since 150
  EXPECT_FALSE(a.observe(249 * kUs, false));
  EXPECT_TRUE(a.observe(250 * kUs, false));
}

TEST(HpActivity, ZeroWindowOpensAtTheFirstIdleLook) {
  HpActivity a(0);
  a.submitted(0);
  EXPECT_TRUE(a.observe(1, false));
}

KernelFacts longKernel() {
  KernelFacts f;
  f.blocks = 100000;
  f.waveBlocks = 1000;  // 100 waves
  f.hasPtb = true;
  f.hasSliced = true;
  f.originalMicros = 10000;  // 10 ms: 100 µs per block and worker
  f.launchesSeen = 10;
  return f;
}

TEST(ChooseLaunch, UnknownKernelsRunOriginalAndAreTimed) {
  KernelFacts f = longKernel();
  f.originalMicros.reset();
  f.launchesSeen = 0;
  LaunchChoice c = chooseLaunch(f, ChoiceKnobs{});
  EXPECT_EQ(c.kind, VariantKind::kOriginal);
  EXPECT_TRUE(c.measure);
  f.originalMicros = 10000;
  f.launchesSeen = 2;  // fewer than measureFirst
  EXPECT_TRUE(chooseLaunch(f, ChoiceKnobs{}).measure);
}

TEST(ChooseLaunch, KernelsOfShortBlocksRunBesideHp) {
  KernelFacts f = longKernel();
  f.originalWaveBlocks = 1000;
  f.originalMicros = 400;  // 100 waves of 4 µs blocks
  LaunchChoice c = chooseLaunch(f, ChoiceKnobs{});
  EXPECT_EQ(c.kind, VariantKind::kOriginal);
  EXPECT_TRUE(c.besideHp);
  f.originalMicros = 4000;  // 40 µs blocks: gated (and transformed: it is longer than the budget)
  c = chooseLaunch(f, ChoiceKnobs{});
  EXPECT_FALSE(c.besideHp);
  EXPECT_EQ(c.kind, VariantKind::kPtb);
}

TEST(ChooseLaunch, ShortKernelsRunOriginal) {
  KernelFacts f = longKernel();
  f.originalMicros = 80;
  EXPECT_EQ(chooseLaunch(f, ChoiceKnobs{}).kind, VariantKind::kOriginal);
}

TEST(ChooseLaunch, PtbChunkFitsTheBudget) {
  ChoiceKnobs k;
  k.budgetMicros = 100;
  LaunchChoice c = chooseLaunch(longKernel(), k);
  EXPECT_EQ(c.kind, VariantKind::kPtb);
  EXPECT_EQ(c.workers, 1000u);
  EXPECT_EQ(c.chunk, 1u);  // one 100 µs block per worker already fills the budget
  k.budgetMicros = 1000;
  EXPECT_EQ(chooseLaunch(longKernel(), k).chunk, 10u);
  k.budgetMicros = 1e6;  // short compared with the budget: no need to transform
  EXPECT_EQ(chooseLaunch(longKernel(), k).kind, VariantKind::kOriginal);
  KernelFacts tiny = longKernel();
  tiny.originalMicros = 200;  // 2 µs blocks: the chunk is capped
  k.budgetMicros = 150;
  LaunchChoice t = chooseLaunch(tiny, k);
  EXPECT_EQ(t.kind, VariantKind::kPtb);
  EXPECT_EQ(t.chunk, 64u);
}

TEST(ChooseLaunch, SlicesWhenThereIsNoPtbAndNothingWhenTransformsAreOff) {
  KernelFacts f = longKernel();
  f.hasPtb = false;
  ChoiceKnobs k;
  k.budgetMicros = 1000;
  LaunchChoice c = chooseLaunch(f, k);
  EXPECT_EQ(c.kind, VariantKind::kSliced);
  EXPECT_EQ(c.slices, 10u);  // 10 ms in 1 ms slices
  k.useTransforms = false;
  EXPECT_EQ(chooseLaunch(longKernel(), k).kind, VariantKind::kOriginal);
  f.hasSliced = false;
  EXPECT_EQ(chooseLaunch(f, ChoiceKnobs{}).kind, VariantKind::kOriginal);
}

TEST(KernelProfiles, MeanPersistsAndBadFilesAreRefused) {
  KernelProfiles p;
  p.record("m/k/1x1x1/128x1x1/0", 100);
  p.record("m/k/1x1x1/128x1x1/0", 200);
  EXPECT_DOUBLE_EQ(*p.micros("m/k/1x1x1/128x1x1/0"), 150);
  EXPECT_EQ(p.samples("m/k/1x1x1/128x1x1/0"), 2u);
  EXPECT_FALSE(p.micros("other"));
  auto dir = std::filesystem::temp_directory_path() / ("tally-profiles-" + std::to_string(::getpid()));
  std::string error;
  ASSERT_TRUE(p.save((dir / "d.tsv").string(), error)) << error;
  KernelProfiles q;
  ASSERT_TRUE(q.load((dir / "d.tsv").string(), error)) << error;
  EXPECT_DOUBLE_EQ(*q.micros("m/k/1x1x1/128x1x1/0"), 150);
  EXPECT_TRUE(q.load((dir / "missing.tsv").string(), error));  // nothing learned yet is fine
  std::ofstream(dir / "bad.tsv") << "key-without-numbers\n";
  EXPECT_FALSE(q.load((dir / "bad.tsv").string(), error));
  EXPECT_NE(error.find("bad.tsv:1"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(PtbNextStep, FinishesResumesOnlyWhenTheGateIsOpenOrWaits) {
  EXPECT_EQ(ptbNextStep(7, 6, 7, false), PtbStep::kFinished);
  EXPECT_EQ(ptbNextStep(6, 7, 7, false), PtbStep::kWait);  // stopped, HP busy
  EXPECT_EQ(ptbNextStep(6, 7, 7, true), PtbStep::kResume);
  EXPECT_EQ(ptbNextStep(6, 6, 7, true), PtbStep::kWait);   // running (preempted lowered before resuming)
  EXPECT_EQ(ptbNextStep(0xffffffffu, 0xffffffffu, 0, true), PtbStep::kWait);  // sequence numbers wrap
  EXPECT_EQ(ptbNextStep(0, 0xfffffffeu, 0, true), PtbStep::kFinished);
}

// ---- a simulated device ------------------------------------------------------------------------
//
// A BE tenant's thread running PTB kernels the way the policy does (launch, then wait for the
// finisher's word, resuming after each retreat once HP is idle), an HP tenant submitting work at
// given times, and the monitor's decisions every microsecond. Blocks take a fixed time; each of
// `workers` workers claims `chunk` blocks at a time and checks the retreat flag between chunks.
struct SimKernel {
  uint64_t blocks;
  double blockMicros;
};

struct Sim {
  HpActivity activity{100 * kUs};
  std::vector<std::pair<Nanos, Nanos>> hp;  // (submitted, length)
  std::vector<SimKernel> kernels;
  uint64_t workers = 1000;
  uint32_t chunk = 1;
  Nanos disconnectAt = -1;  // the client goes away (its thread notices after its current launch)

  // device
  uint32_t done = 0, preempted = 0;
  bool retreat = false;
  uint64_t progress = 0;
  bool running = false;
  Nanos chunkEnd = 0;
  // the BE thread
  size_t current = 0;
  uint32_t seq = 0;
  bool waitingForGate = true;
  // observations
  uint64_t blocksRun = 0, resumes = 0;
  std::vector<size_t> completed;
  Nanos worstRetreat = 0, retreatRaisedAt = 0, releasedAt = -1;
  bool resumedWhileHpBusy = false;

  void deviceStep(Nanos now) {
    const SimKernel& k = kernels[current];
    while (running && chunkEnd <= now) {
      if (progress >= k.blocks) {  // the finisher: grid complete
        running = false;
        done = seq;
      } else if (retreat) {  // every worker saw the flag at its chunk boundary
        running = false;
        preempted = seq;
        worstRetreat = std::max(worstRetreat, now - retreatRaisedAt);
      } else {
        uint64_t take = std::min<uint64_t>(k.blocks - progress, workers * chunk);
        progress += take;
        blocksRun += take;
        chunkEnd += static_cast<Nanos>(k.blockMicros * kUs * chunk);
      }
    }
  }

  void run(Nanos limit) {
    Nanos hpEnd = 0;
    for (Nanos t = 0; t < limit && releasedAt < 0; t += kUs) {
      for (auto [start, length] : hp) {
        if (t != start) continue;
        if (activity.submitted(t)) {  // the policy closes the gate and raises every retreat
          retreat = true;
          retreatRaisedAt = t;
        }
        hpEnd = std::max(hpEnd, t + length);
      }
      const bool hpBusy = t < hpEnd;
      if (activity.observe(t, hpBusy)) retreat = false;  // the monitor opens the gate
      deviceStep(t);
      if (current == kernels.size() || (disconnectAt >= 0 && t >= disconnectAt && waitingForGate)) {
        releasedAt = t;  // the thread is between launches: the tenant is released now
        break;
      }
      if (waitingForGate) {
        if (!activity.gateOpen()) continue;
        waitingForGate = false;
        ++seq;
        progress = 0;
        running = true;
        chunkEnd = t;
        continue;
      }
      switch (ptbNextStep(done, preempted, seq, activity.gateOpen())) {
        case PtbStep::kFinished:
          completed.push_back(current++);
          waitingForGate = true;
          break;
        case PtbStep::kResume:
          resumedWhileHpBusy = resumedWhileHpBusy || hpBusy;
          preempted = seq - 1;
          ++resumes;
          running = true;
          chunkEnd = t;
          break;
        case PtbStep::kWait:
          break;
      }
    }
  }
};

TEST(SimulatedDevice, PreemptedKernelsResumeAndFinishExactlyOnceInOrder) {
  Sim sim;
  sim.kernels = {{200000, 40}, {50000, 40}};  // 8 ms and 2 ms alone, 40 µs blocks
  KernelFacts facts;
  facts.blocks = 200000;
  facts.waveBlocks = facts.originalWaveBlocks = 1000;
  facts.hasSliced = facts.hasPtb = true;
  facts.originalMicros = 200000 / 1000 * 40.0;
  facts.launchesSeen = 10;
  ChoiceKnobs knobs;
  knobs.budgetMicros = 100;
  LaunchChoice c = chooseLaunch(facts, knobs);
  ASSERT_EQ(c.kind, VariantKind::kPtb);
  EXPECT_EQ(c.chunk, 2u);  // 100 µs budget / 40 µs blocks
  sim.chunk = c.chunk;
  // HP requests of 300 µs at 1 ms, 3 ms, 3.2 ms (overlapping) and 9.5 ms (the second kernel).
  sim.hp = {{1000 * kUs, 300 * kUs}, {3000 * kUs, 300 * kUs}, {3200 * kUs, 300 * kUs}, {9500 * kUs, 300 * kUs}};
  sim.run(100000 * kUs);
  EXPECT_EQ(sim.completed, (std::vector<size_t>{0, 1}));  // in order
  EXPECT_EQ(sim.blocksRun, 250000u);  // every block once, none lost to a retreat
  EXPECT_EQ(sim.resumes, 3u);          // 1 ms, 3 ms (3.2 ms lands in the same busy period), 9.5 ms
  EXPECT_FALSE(sim.resumedWhileHpBusy);
  EXPECT_LE(sim.worstRetreat, 80 * kUs);  // a retreat waits for at most the chunk in flight
}

TEST(SimulatedDevice, DisconnectMidPreemptionFinishesTheKernelThenReleases) {
  // The client goes away while its kernel is stopped for HP: its thread resumes and completes
  // the kernel once HP is idle (the stream must drain before the tenant's memory is freed), and
  // only then is the tenant released; nothing else of it runs.
  Sim sim;
  sim.kernels = {{200000, 40}, {50000, 40}};
  sim.chunk = 2;
  sim.hp = {{1000 * kUs, 2000 * kUs}};
  sim.disconnectAt = 1500 * kUs;  // mid-preemption
  sim.run(100000 * kUs);
  EXPECT_EQ(sim.completed, (std::vector<size_t>{0}));
  EXPECT_EQ(sim.blocksRun, 200000u);
  EXPECT_EQ(sim.resumes, 1u);
  EXPECT_GE(sim.releasedAt, 3000 * kUs + 100 * kUs);  // after HP ended and the idle window passed
}

}  // namespace
}  // namespace tally::server::scheduler
