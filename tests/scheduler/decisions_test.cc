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

TEST(PartitionSplit, SplitsOnlyWhileBothClassesAreActive) {
  constexpr Nanos kMs = 1000 * kUs;
  PartitionSplit p(200 * kMs);
  EXPECT_FALSE(p.noteWork(false, 0));          // BE alone: the whole GPU
  EXPECT_FALSE(p.noteWork(false, 50 * kMs));
  EXPECT_TRUE(p.noteWork(true, 60 * kMs));     // HP arrives while BE is active: split
  EXPECT_TRUE(p.noteWork(false, 70 * kMs));    // BE's next work goes to its partition
  EXPECT_TRUE(p.split(259 * kMs));             // HP's last work is 199 ms old
  EXPECT_FALSE(p.split(260 * kMs));            // HP idle for the window: BE gets every SM again
  EXPECT_FALSE(p.noteWork(false, 300 * kMs));
  EXPECT_TRUE(p.noteWork(true, 310 * kMs));
  EXPECT_FALSE(p.noteWork(true, 600 * kMs));   // BE gone quiet: HP alone gets every SM
}

TEST(PartitionSplit, NeverSplitsForOneClass) {
  PartitionSplit p(1000 * kUs);
  for (Nanos t = 0; t < 100 * kUs; t += kUs) EXPECT_FALSE(p.noteWork(true, t));
  PartitionSplit q(1000 * kUs);
  for (Nanos t = 0; t < 100 * kUs; t += kUs) EXPECT_FALSE(q.noteWork(false, t));
}

// Feeds `count` HP waits of `micros` each (with every 50th ten times longer: a tail).
void feed(PartitionController& c, size_t count, double micros) {
  for (size_t i = 0; i < count; ++i) c.observeHpWait(i % 50 == 49 ? micros * 10 : micros);
}

PartitionController::Knobs smallKnobs() {
  PartitionController::Knobs k;
  k.window = 100;
  k.probeEvery = 300;
  k.maxProbeEvery = 1200;
  return k;
}

// After a move the first half window (50 waits here) is not measured: `measured` feeds those
// and then `count` measured waits.
void measured(PartitionController& c, size_t count, double micros) {
  feed(c, 50, micros);
  feed(c, count, micros);
}

PartitionController budgeted(size_t levels, double budgetMicros) {
  PartitionController::Knobs k = smallKnobs();
  k.levels = levels;
  k.budget.micros = budgetMicros;
  return PartitionController(k);
}

// Ordinary waits, then two of 9 ms: a probe whose bound is below that fails on the second.
void twoSlowWaits(PartitionController& c, double micros) {
  feed(c, 10, micros);
  c.observeHpWait(9000);
  c.observeHpWait(9000);
}

TEST(PartitionController, StartsSplitAndKeepsSharingWhenItServesHpAsWell) {
  PartitionController c(smallKnobs());
  EXPECT_TRUE(c.wantSplit());
  feed(c, 300, 400);  // split: p99 4 ms
  EXPECT_FALSE(c.wantSplit()) << "probes sharing after probeEvery waits";
  EXPECT_EQ(c.probes(), 1u);
  EXPECT_NEAR(c.p99At(1), 4000, 1);
  measured(c, 100, 300);  // sharing serves HP better (short BE blocks)
  EXPECT_FALSE(c.wantSplit());
  EXPECT_NEAR(c.p99At(0), 3000, 1);
  feed(c, 1000, 300);  // and keeps doing so
  EXPECT_FALSE(c.wantSplit());
  EXPECT_EQ(c.probes(), 1u);
}

TEST(PartitionController, SplitsAgainWhenSharingHurtsAndBacksOff) {
  PartitionController c(smallKnobs());
  feed(c, 300, 400);
  ASSERT_FALSE(c.wantSplit());
  measured(c, 100, 4000);  // sharing: HP waits behind long BE blocks
  EXPECT_TRUE(c.wantSplit());
  measured(c, 300, 400);   // the next probe waits twice as long
  EXPECT_TRUE(c.wantSplit());
  feed(c, 300, 400);
  EXPECT_FALSE(c.wantSplit());
  EXPECT_EQ(c.probes(), 2u);
  measured(c, 100, 4000);
  EXPECT_TRUE(c.wantSplit());
  measured(c, 1200, 400);  // capped at maxProbeEvery
  EXPECT_FALSE(c.wantSplit());
  EXPECT_EQ(c.probes(), 3u);
}

// A window of 200 waits misses its target once 2 of them are over it (its p99, the second
// largest, is then over too): the controller need not wait for the rest.
TEST(PartitionController, SharingThatStartsHurtingSplitsWithinTwoSlowWaits) {
  PartitionController::Knobs k = smallKnobs();
  k.window = 200;
  k.probeEvery = 600;
  PartitionController c(k);
  feed(c, 600, 400);
  feed(c, 100, 300);  // settling after the move
  feed(c, 200, 300);
  ASSERT_FALSE(c.wantSplit()) << "sharing kept";
  feed(c, 10, 300);
  c.observeHpWait(5000);  // BE turned to long blocks
  EXPECT_FALSE(c.wantSplit()) << "one slow wait in a window is what its p99 tolerates";
  feed(c, 10, 300);
  c.observeHpWait(5000);
  EXPECT_TRUE(c.wantSplit());
}

TEST(PartitionController, AFailedProbeCostsHpTwoSlowWaitsNotAWindow) {
  PartitionController::Knobs k = smallKnobs();
  k.window = 200;
  k.probeEvery = 600;
  k.levels = 2;
  k.budget.micros = 5000;
  PartitionController c(k);
  feed(c, 600, 300);
  ASSERT_EQ(c.level(), 1u) << "probing the smaller reserve";
  feed(c, 10, 300);  // settling after the move: waits within the budget are not measured yet
  c.observeHpWait(9000);  // ... but those over it count against the probe at once
  EXPECT_EQ(c.level(), 1u);
  c.observeHpWait(9000);
  EXPECT_EQ(c.level(), 2u) << "two waits over the budget decide the window";
  EXPECT_NEAR(c.p99At(1), 9000, 1);
}

TEST(PartitionController, WithinToleranceCountsAsServingAsWell) {
  PartitionController c(smallKnobs());
  feed(c, 300, 400);
  measured(c, 100, 430);  // 7.5 % slower: within 10 %
  EXPECT_FALSE(c.wantSplit());
  feed(c, 100, 460);  // 15 % slower: split
  EXPECT_TRUE(c.wantSplit());
}

// A probe that passes and then fails its first settled window hurt HP all the same: the next
// probe waits twice as long, so a pair at the edge is not probed at the base rate forever.
TEST(PartitionController, AProbeThatPassedAndThenFailedBacksOffToo) {
  PartitionController c(smallKnobs());
  feed(c, 300, 400);
  measured(c, 100, 400);  // passes
  ASSERT_FALSE(c.wantSplit());
  feed(c, 100, 5000);  // fails settled: split, next probe after 600
  ASSERT_TRUE(c.wantSplit());
  measured(c, 500, 400);
  EXPECT_TRUE(c.wantSplit());
  feed(c, 100, 400);
  EXPECT_FALSE(c.wantSplit());
}

// With a budget the controller settles on the smallest reserve whose HP p99 meets it: that
// leaves BE the most SMs the operator's bound allows.
TEST(PartitionController, WithABudgetItSettlesOnTheSmallestReserveThatMeetsIt) {
  PartitionController c = budgeted(2, 5000);
  EXPECT_EQ(c.level(), 2u) << "starts at the largest reserve";
  feed(c, 300, 300);  // p99 3 ms: within the budget, so the smaller reserve is tried
  EXPECT_EQ(c.level(), 1u);
  measured(c, 100, 450);  // 4.5 ms: still within the budget, kept although worse than level 2
  EXPECT_EQ(c.level(), 1u);
  feed(c, 300, 450);
  ASSERT_EQ(c.level(), 0u) << "sharing every SM is tried next";
  feed(c, 50, 900);  // its 9 ms tail is over the budget: the probe fails at once
  EXPECT_EQ(c.level(), 1u);
  EXPECT_EQ(c.probes(), 2u);
  measured(c, 100, 700);  // BE changed: level 1 misses the budget too, so one level up at once
  EXPECT_EQ(c.level(), 2u);
}

// Where no level meets the budget, a reserve is kept only where it serves HP better than a
// smaller one: a reserve that buys HP nothing costs BE nothing.
TEST(PartitionController, ABudgetNoLevelMeetsKeepsNoReserveThatBuysHpNothing) {
  PartitionController c = budgeted(2, 1000);
  feed(c, 300, 400);  // p99 4 ms at the largest reserve, over the budget: it probes below anyway
  ASSERT_EQ(c.level(), 1u);
  measured(c, 100, 400);  // as well served: kept
  EXPECT_EQ(c.level(), 1u);
  feed(c, 300, 400);
  ASSERT_EQ(c.level(), 0u);
  measured(c, 100, 400);
  EXPECT_EQ(c.level(), 0u) << "every level serves HP alike: BE gets every SM";
  EXPECT_EQ(c.probes(), 2u);
}

TEST(PartitionController, ABudgetNoLevelMeetsKeepsTheReserveThatServesHpBest) {
  PartitionController c = budgeted(2, 1000);
  feed(c, 300, 400);  // p99 4 ms at the largest reserve
  ASSERT_EQ(c.level(), 1u);
  twoSlowWaits(c, 400);  // over 1.1 x the best seen: the probe fails
  ASSERT_EQ(c.level(), 2u);
  feed(c, 150, 400);  // one window back at the largest reserve, then the next level down
  ASSERT_EQ(c.level(), 0u);
  twoSlowWaits(c, 400);
  ASSERT_EQ(c.level(), 2u) << "every level below tried: back, and twice the wait before the next walk";
  feed(c, 550, 400);
  EXPECT_EQ(c.level(), 2u);
  feed(c, 100, 400);
  EXPECT_EQ(c.level(), 1u);
  EXPECT_EQ(c.probes(), 3u);
}

// Next to short BE blocks a larger plain reserve serves HP worse than a smaller overlapped one
// below it (measured on the H200): a level that fails does not end the walk.
TEST(PartitionController, TheWalkGoesPastALevelThatServesHpWorse) {
  PartitionController c = budgeted(3, 5000);
  feed(c, 300, 300);  // p99 3 ms at the strongest level
  ASSERT_EQ(c.level(), 2u);
  twoSlowWaits(c, 300);
  ASSERT_EQ(c.level(), 3u);
  feed(c, 150, 300);  // one window back, then past the level that failed
  ASSERT_EQ(c.level(), 1u);
  measured(c, 100, 350);  // within the budget: kept
  EXPECT_EQ(c.level(), 1u);
  feed(c, 300, 350);
  ASSERT_EQ(c.level(), 0u);
  twoSlowWaits(c, 350);
  EXPECT_EQ(c.level(), 1u) << "back where the failed probe came from, not to the level above it";
  feed(c, 100, 350);
  EXPECT_EQ(c.settledLevel(), 1u);
  EXPECT_EQ(c.probes(), 3u);
}

TEST(PartitionController, ARelativeBudgetWaitsForHpAlone) {
  PartitionController::Knobs k = smallKnobs();
  k.budget.factor = 1.5;
  PartitionController c(k);
  feed(c, 600, 300);  // p99 3 ms, but HP alone is not known: no probe
  EXPECT_EQ(c.level(), 1u);
  EXPECT_EQ(c.budgetMicros(), 0);
  for (int i = 0; i < 100; ++i) c.observeHpAloneWait(i == 99 ? 2500 : 250);
  EXPECT_NEAR(c.aloneP99(), 2500, 1);
  EXPECT_NEAR(c.budgetMicros(), 3750, 1);
  feed(c, 300, 300);
  EXPECT_EQ(c.level(), 0u) << "3 ms is within 1.5 x 2.5 ms: sharing is tried";
}

// HP alone in between ends the pair: whatever BE comes next starts at the largest reserve.
TEST(PartitionController, ANewPairStartsAtTheLargestReserve) {
  PartitionController c(smallKnobs());
  feed(c, 300, 400);
  measured(c, 100, 300);
  ASSERT_EQ(c.level(), 0u);
  c.observeHpAloneWait(200);
  c.observeHpWait(300);
  EXPECT_EQ(c.level(), 1u);
}

// Three levels, a 5 ms budget, and where an earlier pair settled.
PartitionController rememberingController(size_t remembered) {
  PartitionController c = budgeted(3, 5000);
  c.rememberLevel(remembered);
  return c;
}

// Where an earlier pair settled is the first probe's destination, straight from the strongest
// level after one window there met the target.
TEST(PartitionController, TheFirstProbeOfAPairGoesToTheRememberedLevel) {
  PartitionController c = rememberingController(1);
  feed(c, 99, 300);
  EXPECT_EQ(c.level(), 3u);
  c.observeHpWait(300);  // one window met the budget: the jump
  EXPECT_EQ(c.level(), 1u);
  measured(c, 100, 300);  // the probe passes
  EXPECT_EQ(c.level(), 1u);
  EXPECT_EQ(c.settledLevel(), 3u) << "no window at level 1 has met it outside a probe yet";
  feed(c, 100, 300);
  EXPECT_EQ(c.settledLevel(), 1u);
  EXPECT_EQ(c.probes(), 1u);
}

TEST(PartitionController, AFailedJumpGoesBackWhereItCameFromAndWalksOn) {
  PartitionController c = rememberingController(0);
  feed(c, 100, 300);
  ASSERT_EQ(c.level(), 0u);
  feed(c, 10, 300);
  c.observeHpWait(9000);  // the jump fails (a window of 100: one wait over decides)
  EXPECT_EQ(c.level(), 3u) << "back to the strongest level, not to the one above the jump";
  feed(c, 50 + 600, 300);  // the walk goes on one level at a time, after twice the wait
  EXPECT_EQ(c.level(), 2u);
  c.rememberLevel(7);  // from a ladder with more levels: ignored
  EXPECT_EQ(c.level(), 2u);
}

TEST(HpP99Budget, Parses) {
  std::string error;
  EXPECT_EQ(parseHpP99Budget("600us", error)->micros, 600);
  EXPECT_EQ(parseHpP99Budget("1.25x", error)->factor, 1.25);
  EXPECT_FALSE(parseHpP99Budget("off", error)->set());
  EXPECT_FALSE(parseHpP99Budget("", error)->set());
  for (const char* bad : {"600", "0us", "0.9x", "x", "us", "1.5 x", "-2us", "2xx"}) {
    error.clear();
    EXPECT_FALSE(parseHpP99Budget(bad, error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
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
  f.originalTimed = 10;
  f.launchesSeen = 10;
  return f;
}

TEST(ChooseLaunch, UnknownKernelsRunOriginalAndAreTimed) {
  KernelFacts f = longKernel();
  f.originalMicros.reset();
  f.originalTimed = 0;
  LaunchChoice c = chooseLaunch(f, ChoiceKnobs{});
  EXPECT_EQ(c.kind, VariantKind::kOriginal);
  EXPECT_TRUE(c.measure);
  f.originalMicros = 10000;
  f.originalTimed = 2;  // fewer than measureFirst
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
  tiny.originalMicros = 200;  // under 5 budgets: sliced rather than PTB
  k.budgetMicros = 150;
  LaunchChoice t = chooseLaunch(tiny, k);
  EXPECT_EQ(t.kind, VariantKind::kSliced);
  EXPECT_EQ(t.slices, 2u);
  tiny.hasSliced = false;  // no sliced variant: PTB, 2 µs blocks, the chunk capped
  t = chooseLaunch(tiny, k);
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

TEST(ChooseLaunch, AVariantIsTimedOnItsFirstLaunchesThenNowAndThen) {
  KernelFacts f = longKernel();
  ChoiceKnobs k;
  LaunchChoice c = chooseLaunch(f, k);
  ASSERT_EQ(c.kind, VariantKind::kPtb);
  EXPECT_TRUE(c.measure);  // not timed yet
  f.ptb = {12000.0, k.measureFirst};
  f.launchesSeen = 11;
  EXPECT_FALSE(chooseLaunch(f, k).measure);
  f.launchesSeen = 2 * k.measureEvery;
  EXPECT_TRUE(chooseLaunch(f, k).measure);
}

TEST(ChooseLaunch, AVariantThatDoesNotPayGivesWayToTheOtherThenToTheOriginal) {
  KernelFacts f = longKernel();  // 10 ms: PTB while it pays
  ChoiceKnobs k;
  f.ptb = {10000.0 * 1.3, k.measureFirst};  // within the 1.4x the knob allows
  EXPECT_EQ(chooseLaunch(f, k).kind, VariantKind::kPtb);
  f.ptb = {10000.0 * 6, k.measureFirst - 1};  // slow, but not timed enough to tell
  EXPECT_EQ(chooseLaunch(f, k).kind, VariantKind::kPtb);
  f.ptb = {10000.0 * 6, k.measureFirst};  // PTB does not pay: slices instead
  LaunchChoice c = chooseLaunch(f, k);
  EXPECT_EQ(c.kind, VariantKind::kSliced);
  EXPECT_TRUE(c.measure);  // the slices are not timed yet
  f.sliced = {10000.0 * 3, k.measureFirst};  // neither pays: the original, timed now and then
  c = chooseLaunch(f, k);
  EXPECT_EQ(c.kind, VariantKind::kOriginal);
  EXPECT_FALSE(c.measure);
  f.launchesSeen = k.retryEvery - 1;  // now and then a variant gets another chance
  c = chooseLaunch(f, k);
  EXPECT_EQ(c.kind, VariantKind::kPtb);
  EXPECT_TRUE(c.measure);
  f.ptb.timed = k.measureFirst + 2;  // two tries failed since: it waits 4x as long for the next
  EXPECT_EQ(chooseLaunch(f, k).kind, VariantKind::kSliced);  // whose first retry is due now
  f.sliced.timed = k.measureFirst + 2;
  EXPECT_EQ(chooseLaunch(f, k).kind, VariantKind::kOriginal);
  f.launchesSeen = 4 * k.retryEvery - 1;
  EXPECT_EQ(chooseLaunch(f, k).kind, VariantKind::kPtb);
  EXPECT_TRUE(variantPays(VariantRecord{}, 10000, k));
  EXPECT_FALSE(variantPays(f.sliced, 10000, k));
  EXPECT_TRUE(variantPays(f.sliced, 25000, k));  // against a slower original it pays
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

// ---- a simulated device ------------------------------------------------------------------------
//
// What the policy queues for a BE PTB launch, run on a simulated stream: [run, (pause, run) x
// resumes, pause, last run ignoring the flag]. A run's `workers` claim `chunk` blocks at a time
// and check the retreat flag between chunks; a pause waits while the flag is up and the grid is
// unfinished, at most `maxPause`. The host side is HpActivity: HP submissions raise the flag,
// the monitor lowers it once HP has been idle for the window. Every microsecond is simulated.
struct SimKernel {
  uint64_t blocks;
  double blockMicros;
};

struct Sim {
  HpActivity activity{100 * kUs};
  std::vector<std::pair<Nanos, Nanos>> hp;  // (submitted, length)
  std::vector<SimKernel> kernels;           // BE kernels in stream order
  uint64_t workers = 1000;
  uint32_t chunk = 1;
  unsigned resumes = 4;
  Nanos maxPause = 20000 * kUs;

  // observations
  uint64_t blocksRun = 0, blocksStartedWhileRetreated = 0;
  std::vector<size_t> completed;
  Nanos worstRetreat = 0, drainedAt = -1;

  void run(Nanos limit) {
    enum class Op { kRun, kPause, kLastRun };
    std::vector<Op> ops{Op::kRun};
    for (unsigned i = 0; i < resumes; ++i) ops.insert(ops.end(), {Op::kPause, Op::kRun});
    ops.insert(ops.end(), {Op::kPause, Op::kLastRun});
    size_t kernel = 0, op = 0;
    uint64_t progress = 0;
    bool retreat = false, opStarted = false;
    Nanos hpEnd = 0, raisedAt = 0, opStart = 0, chunkEnd = 0;
    for (Nanos t = 0; t < limit && kernel < kernels.size(); t += kUs) {
      for (auto [start, length] : hp) {
        if (t != start) continue;
        if (activity.submitted(t)) {
          retreat = true;
          raisedAt = t;
        }
        hpEnd = std::max(hpEnd, t + length);
      }
      if (activity.observe(t, t < hpEnd)) retreat = false;
      const SimKernel& k = kernels[kernel];
      if (!opStarted) {
        opStarted = true;
        opStart = chunkEnd = t;
      }
      bool opDone = false;
      switch (ops[op]) {
        case Op::kPause:
          opDone = !retreat || progress >= k.blocks || t - opStart >= maxPause;
          break;
        case Op::kRun:
        case Op::kLastRun:
          while (!opDone && chunkEnd <= t) {
            if (progress >= k.blocks) {
              opDone = true;
            } else if (retreat && ops[op] == Op::kRun) {
              worstRetreat = std::max(worstRetreat, t - raisedAt);
              opDone = true;
            } else {
              uint64_t take = std::min<uint64_t>(k.blocks - progress, workers * chunk);
              if (retreat) blocksStartedWhileRetreated += take;
              progress += take;
              blocksRun += take;
              chunkEnd += static_cast<Nanos>(k.blockMicros * kUs * chunk);
            }
          }
          break;
      }
      if (!opDone) continue;
      opStarted = false;
      if (++op == ops.size()) {
        ASSERT_GE(progress, k.blocks) << "the stream moved on from an unfinished kernel";
        completed.push_back(kernel++);
        op = 0;
        progress = 0;
        if (kernel == kernels.size()) drainedAt = t;
      }
    }
  }
};

TEST(SimulatedDevice, RetreatedKernelsResumeAndFinishExactlyOnceInOrder) {
  Sim sim;
  sim.kernels = {{200000, 40}, {50000, 40}};  // 8 ms and 2 ms alone, 40 µs blocks
  KernelFacts facts;
  facts.blocks = 200000;
  facts.waveBlocks = facts.originalWaveBlocks = 1000;
  facts.hasSliced = facts.hasPtb = true;
  facts.originalMicros = 200000 / 1000 * 40.0;
  facts.originalTimed = 10;
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
  EXPECT_EQ(sim.blocksRun, 250000u);                       // every block once, none lost to a retreat
  EXPECT_EQ(sim.blocksStartedWhileRetreated, 0u);          // nothing claimed while HP runs
  EXPECT_LE(sim.worstRetreat, 80 * kUs);                   // at most the chunk in flight
}

TEST(SimulatedDevice, BestEffortDrainsEvenIfHpNeverGoesIdle) {
  // HP busy from 1 ms on, for ever: the pauses time out and the last run ignores the flag, so
  // the stream always drains (a tenant that disconnects here is released in bounded time).
  Sim sim;
  sim.kernels = {{200000, 40}, {50000, 40}};
  sim.chunk = 2;
  sim.maxPause = 2000 * kUs;
  sim.hp = {{1000 * kUs, 1000000 * kUs}};
  sim.run(1000000 * kUs);
  EXPECT_EQ(sim.completed, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(sim.blocksRun, 250000u);
  // Kernel 0: 1 ms of work, 5 pauses of 2 ms, then the rest; kernel 1 goes through its pauses too.
  EXPECT_GT(sim.drainedAt, 1000 * kUs + 5 * 2000 * kUs);
  EXPECT_LT(sim.drainedAt, 40000 * kUs);
}

}  // namespace
}  // namespace tally::server::scheduler
