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

TEST(PtbLaneBook, RetiresInOrderAndResumesOnlyTheFrontWhenTheGateIsOpen) {
  PtbLaneBook b;
  EXPECT_EQ(b.add(), 1u);
  EXPECT_EQ(b.add(), 2u);
  EXPECT_TRUE(b.observe(0, 0, true).empty());
  auto a = b.observe(0, 1, false);  // run 1 stopped, but HP is busy
  EXPECT_TRUE(a.empty());
  a = b.observe(0, 1, true);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, PtbLaneBook::Action::kResume);
  EXPECT_EQ(a[0].seq, 1u);
  a = b.observe(1, 0, true);  // run 1 done (caller lowered `preempted`)
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, PtbLaneBook::Action::kRetire);
  a = b.observe(2, 0, true);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].seq, 2u);
  EXPECT_TRUE(b.empty());
}

// ---- a simulated device ------------------------------------------------------------------------
//
// One BE stream running PTB kernels as the policy sets them up (each stream op in order: run,
// finisher, wait for done >= seq), an HP tenant submitting work at given times, and the
// monitor's decisions every microsecond. Blocks take a fixed time; a worker claims `chunk`
// blocks at a time and checks the retreat flag between chunks.
struct SimKernel {
  uint64_t blocks;
  double blockMicros;
};

struct Sim {
  HpActivity activity{100 * kUs};
  PtbLaneBook book;
  uint64_t workers = 0;
  uint32_t chunk = 1;
  // device state
  uint32_t done = 0, preempted = 0;
  bool retreat = false;
  uint64_t progress = 0;        // claimed blocks of the running kernel
  std::vector<SimKernel> queue;  // BE kernels in stream order
  size_t current = 0;
  bool running = false;
  Nanos runEnd = 0;             // when the workers in flight finish their chunks
  uint64_t blocksRun = 0;       // across kernels: each block exactly once
  std::vector<uint64_t> completedOrder;
  Nanos lastHpEnd = 0;
  bool hpBusy = false;
  uint64_t resumes = 0;
  Nanos worstRetreat = 0;
  Nanos retreatRaisedAt = -1;

  // Runs the workers until the grid is done or the retreat flag stops them. Blocks run in
  // waves of `workers`; the flag is checked each `chunk` blocks.
  void startRun(Nanos now) {
    running = true;
    runEnd = now;
  }
  void advanceRun(Nanos now) {
    const SimKernel& k = queue[current];
    while (running && runEnd <= now) {
      if (progress >= k.blocks) {  // finisher: complete
        running = false;
        done = static_cast<uint32_t>(current + 1);
        completedOrder.push_back(current + 1);
        break;
      }
      if (retreat) {  // every worker found the flag at its chunk boundary
        running = false;
        preempted = static_cast<uint32_t>(current + 1);
        worstRetreat = std::max(worstRetreat, now - retreatRaisedAt);
        break;
      }
      uint64_t take = std::min<uint64_t>(k.blocks - progress, workers * chunk);
      progress += take;
      blocksRun += take;
      runEnd += static_cast<Nanos>(k.blockMicros * kUs * chunk);
    }
  }
};

TEST(SimulatedDevice, PreemptedKernelsResumeAndFinishExactlyOnceInOrder) {
  Sim sim;
  ChoiceKnobs knobs;
  knobs.budgetMicros = 100;
  sim.queue = {{200000, 40}, {50000, 40}};  // two BE kernels (8 ms and 2 ms alone), 40 µs blocks
  sim.workers = 1000;
  KernelFacts facts{200000, 1000, true, true, 200000 / 1000 * 40.0, 10};
  LaunchChoice c = chooseLaunch(facts, knobs);
  ASSERT_EQ(c.kind, VariantKind::kPtb);
  sim.chunk = c.chunk;  // 100 µs budget / 40 µs blocks -> 2
  EXPECT_EQ(sim.chunk, 2u);
  sim.book.add();
  sim.book.add();
  sim.startRun(0);
  // HP requests of 300 µs at 1 ms, 3 ms, 3.2 ms (overlapping) and 9.5 ms (the second kernel).
  const std::vector<std::pair<Nanos, Nanos>> hp = {{1000 * kUs, 300 * kUs}, {3000 * kUs, 300 * kUs},
                                                   {3200 * kUs, 300 * kUs}, {9500 * kUs, 300 * kUs}};
  for (Nanos t = 0; t < 100000 * kUs && sim.completedOrder.size() < 2; t += kUs) {
    for (auto [start, length] : hp) {
      if (t == start) {
        if (sim.activity.submitted(t)) {
          sim.retreat = true;
          sim.retreatRaisedAt = t;
        }
        sim.lastHpEnd = std::max(sim.lastHpEnd, t + length);
      }
    }
    sim.hpBusy = t < sim.lastHpEnd;
    if (sim.running) sim.advanceRun(t);
    // The stream moves to the next kernel once `done` covers the current one.
    if (!sim.running && sim.done == sim.current + 1 && sim.current + 1 < sim.queue.size() && sim.activity.gateOpen()) {
      ++sim.current;
      sim.progress = 0;
      sim.startRun(t);
    }
    if (sim.activity.observe(t, sim.hpBusy)) sim.retreat = false;
    for (auto a : sim.book.observe(sim.done, sim.preempted, sim.activity.gateOpen())) {
      if (a.kind == PtbLaneBook::Action::kResume) {
        EXPECT_FALSE(sim.hpBusy) << "resumed while HP runs, at " << t;
        sim.preempted = static_cast<uint32_t>(a.seq - 1);
        ++sim.resumes;
        sim.startRun(t);
      }
    }
  }
  EXPECT_EQ(sim.completedOrder, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(sim.blocksRun, 250000u);  // every block once, none lost to a retreat
  EXPECT_EQ(sim.resumes, 3u);          // 1 ms, 3 ms (3.2 ms lands in the same HP busy period), 9.5 ms
  // A retreat waits for at most the chunk in flight: 2 x 40 µs.
  EXPECT_LE(sim.worstRetreat, 80 * kUs);
  EXPECT_TRUE(sim.book.empty());
}

TEST(SimulatedDevice, DisconnectMidPreemptionReleasesTheStream) {
  // The tenant ends while its kernel is preempted: the policy writes done = last sequence
  // number, which retires every pending launch, so the stream's waits all pass.
  PtbLaneBook b;
  b.add();
  b.add();
  b.add();
  EXPECT_TRUE(b.observe(0, 1, false).empty());  // run 1 stopped, HP busy
  auto a = b.observe(b.lastSeq(), 1, false);
  ASSERT_EQ(a.size(), 3u);
  for (auto& x : a) EXPECT_EQ(x.kind, PtbLaneBook::Action::kRetire);
  EXPECT_TRUE(b.empty());
}

}  // namespace
}  // namespace tally::server::scheduler
