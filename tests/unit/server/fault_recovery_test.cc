// Fault recovery without a GPU: who is blamed for a fault of the shared context, what every
// tenant is told afterwards, when a tenant that keeps faulting is refused, and that the history
// survives tallyd starting over (serialize -> parse).
#include "server/gpu/fault_monitor.h"
#include "server/session/fault_history.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

namespace tally::server {
namespace {

using gpu::FaultEvidence;
using gpu::FaultMonitor;
using gpu::FaultVerdict;
using session::FaultHistory;
using namespace std::chrono_literals;

TEST(FaultEvidence, LaunchesAreSettledOnlyByASyncThatCoveredThem) {
  FaultEvidence e(1, "a");
  EXPECT_FALSE(e.unsettled());
  e.noteLaunch();
  uint64_t covered = e.launchesSoFar();
  e.noteLaunch();  // after the sync was issued: not covered by it
  e.noteSettled(covered);
  EXPECT_TRUE(e.unsettled());
  e.noteSettled(e.launchesSoFar());
  EXPECT_FALSE(e.unsettled());
  EXPECT_FALSE(e.unsettledSince().has_value());
  e.noteSettled(covered);  // a late, older completion never unsettles
  EXPECT_FALSE(e.unsettled());
}

TEST(FaultEvidence, UnsettledWindowStartsAtTheFirstUncoveredLaunch) {
  FaultEvidence e(1, "a");
  auto t0 = FaultEvidence::Clock::now();
  e.noteLaunch(t0);
  e.noteLaunch(t0 + 5s);
  ASSERT_TRUE(e.unsettledSince().has_value());
  EXPECT_EQ(*e.unsettledSince(), t0);
}

TEST(Suspicion, OnlyTenantsWithUnfinishedWork) {
  auto idle = std::make_shared<FaultEvidence>(1, "idle");
  auto settled = std::make_shared<FaultEvidence>(2, "settled");
  auto busy = std::make_shared<FaultEvidence>(3, "busy");
  settled->noteLaunch();
  settled->noteSettled(settled->launchesSoFar());
  busy->noteLaunch();
  auto s = gpu::suspicionOf({idle, settled, busy});
  ASSERT_EQ(s.suspects.size(), 1u);
  EXPECT_EQ(s.culprit, std::optional<uint64_t>(3));
}

TEST(Suspicion, OfSeveralTheLongestUnfinishedIsBlamed) {
  auto t0 = FaultEvidence::Clock::now();
  auto stuck = std::make_shared<FaultEvidence>(1, "stuck");
  auto progressing = std::make_shared<FaultEvidence>(2, "progressing");
  stuck->noteLaunch(t0);
  progressing->noteLaunch(t0 + 1ms);
  progressing->noteSettled(progressing->launchesSoFar());  // its syncs keep completing...
  progressing->noteLaunch(t0 + 6ms);                        // ... and it launched again since
  auto s = gpu::suspicionOf({progressing, stuck});
  EXPECT_EQ(s.culprit, std::optional<uint64_t>(1));
  EXPECT_EQ(s.suspects.size(), 2u);
  EXPECT_TRUE(s.clear);  // 6 ms apart
}

TEST(Suspicion, WindowsOpenedInTheSameInstantAreNotAClearBlame) {
  auto t0 = FaultEvidence::Clock::now();
  auto a = std::make_shared<FaultEvidence>(1, "a");
  auto b = std::make_shared<FaultEvidence>(2, "b");
  a->noteLaunch(t0);
  b->noteLaunch(t0 + 200us);
  auto s = gpu::suspicionOf({b, a});
  EXPECT_EQ(s.culprit, std::optional<uint64_t>(1));
  EXPECT_FALSE(s.clear);
  EXPECT_TRUE(gpu::suspicionOf({a}).clear);  // alone: nobody else to blame
}

TEST(Suspicion, NobodyWhenNoTenantHadWork) {
  auto idle = std::make_shared<FaultEvidence>(1, "idle");
  EXPECT_FALSE(gpu::suspicionOf({idle}).culprit.has_value());
}

// Kernel marks without a GPU: the test plays the GPU by storing into the words.
struct MarkedTenant {
  std::vector<uint32_t> words;
  std::shared_ptr<std::atomic<bool>> shared = std::make_shared<std::atomic<bool>>(true);
  std::shared_ptr<FaultEvidence> evidence;
  std::vector<std::pair<CUdeviceptr, uint32_t>> written;  // what the writer queued
  CUresult writeResult = CUDA_SUCCESS;
  gpu::MarkWriter writer = [this](CUstream, CUdeviceptr address, uint32_t value) {
    written.emplace_back(address, value);
    return writeResult;
  };

  MarkedTenant(uint64_t id, const char* name, size_t streams = 4) : words(streams, 0) {
    evidence = std::make_shared<FaultEvidence>(id, name);
    evidence->attachMarks(gpu::MarkWords{words.data(), reinterpret_cast<CUdeviceptr>(words.data()), words.size()}, shared);
  }
  void launchOn(uintptr_t stream, FaultEvidence::Clock::time_point at) {
    evidence->noteLaunch(at);
    evidence->noteKernelOn(reinterpret_cast<CUstream>(stream));
  }
  void gpuPassesQueuedMarks() {
    for (auto [address, value] : written) *reinterpret_cast<uint32_t*>(address) = value;
  }
};

TEST(KernelMarks, AKernelMayRunUntilTheGpuPassesTheMarkAfterIt) {
  MarkedTenant t(1, "a");
  t.launchOn(1, FaultEvidence::Clock::now());
  EXPECT_TRUE(t.evidence->kernelsMayRun());  // queued, no mark yet
  t.evidence->writeMarks(t.writer);
  ASSERT_EQ(t.written.size(), 1u);
  EXPECT_TRUE(t.evidence->kernelsMayRun());  // marked, not yet passed
  t.gpuPassesQueuedMarks();
  EXPECT_FALSE(t.evidence->kernelsMayRun());
  EXPECT_TRUE(t.evidence->unsettled());  // still unfinished work: a copy after it, say
  t.evidence->writeMarks(t.writer);
  EXPECT_EQ(t.written.size(), 1u);  // nothing new to mark
}

TEST(KernelMarks, OneMarkPerStreamPerBurst) {
  MarkedTenant t(1, "a");
  auto now = FaultEvidence::Clock::now();
  t.launchOn(1, now);
  t.launchOn(1, now);
  t.launchOn(2, now);
  t.evidence->writeMarks(t.writer);
  ASSERT_EQ(t.written.size(), 2u);
  EXPECT_NE(t.written[0].first, t.written[1].first);  // a word per stream: they finish in any order
  *reinterpret_cast<uint32_t*>(t.written[0].first) = t.written[0].second;
  EXPECT_TRUE(t.evidence->kernelsMayRun());  // the other stream's mark is not passed
}

TEST(KernelMarks, AloneOrUnmarkableKernelsMayRunUntilASyncSettlesThem) {
  MarkedTenant alone(1, "alone");
  alone.shared->store(false);
  alone.launchOn(1, FaultEvidence::Clock::now());
  alone.evidence->writeMarks(alone.writer);
  EXPECT_TRUE(alone.written.empty());  // a tenant alone pays nothing
  EXPECT_TRUE(alone.evidence->kernelsMayRun());
  alone.evidence->noteSettled(alone.evidence->launchesSoFar());
  EXPECT_FALSE(alone.evidence->kernelsMayRun());

  MarkedTenant failing(2, "failing");
  failing.writeResult = CUDA_ERROR_INVALID_HANDLE;
  failing.launchOn(1, FaultEvidence::Clock::now());
  failing.evidence->writeMarks(failing.writer);
  failing.gpuPassesQueuedMarks();  // even if a word happened to read so
  EXPECT_TRUE(failing.evidence->kernelsMayRun());

  MarkedTenant oneWord(3, "one word", 1);
  oneWord.launchOn(1, FaultEvidence::Clock::now());
  oneWord.launchOn(2, FaultEvidence::Clock::now());  // no word left for a second stream
  oneWord.evidence->writeMarks(oneWord.writer);
  oneWord.gpuPassesQueuedMarks();
  EXPECT_TRUE(oneWord.evidence->kernelsMayRun());
  oneWord.evidence->noteSettled(oneWord.evidence->launchesSoFar());
  oneWord.launchOn(2, FaultEvidence::Clock::now());  // the word passed its mark: stream 2 takes it
  oneWord.evidence->writeMarks(oneWord.writer);
  oneWord.gpuPassesQueuedMarks();
  EXPECT_FALSE(oneWord.evidence->kernelsMayRun());
}

// The misses of tests/gpu/fault_recovery.sh: a bystander's sync window opened just before the
// faulting launch, but its kernel had finished; the faulting kernel's mark is never passed.
TEST(Suspicion, ABystanderWhoseKernelsFinishedIsNotBlamed) {
  auto t0 = FaultEvidence::Clock::now();
  MarkedTenant bystander(1, "bystander"), faulty(2, "faulty");
  bystander.launchOn(1, t0);
  bystander.evidence->writeMarks(bystander.writer);  // then a copy back: its burst ended
  bystander.gpuPassesQueuedMarks();
  faulty.launchOn(1, t0 + 80us);
  faulty.evidence->writeMarks(faulty.writer);  // then a sync, which never completes
  auto s = gpu::suspicionOf({bystander.evidence, faulty.evidence});
  EXPECT_EQ(s.culprit, std::optional<uint64_t>(2));
  EXPECT_EQ(s.suspects.size(), 2u);  // both are told about, one is blamed
  EXPECT_TRUE(s.clear);

  // Without marks the older window is blamed, and the blame is not clear.
  bystander.shared->store(false);
  MarkedTenant unmarked(3, "unmarked");
  unmarked.shared->store(false);
  unmarked.launchOn(1, t0 + 80us);
  bystander.launchOn(1, t0 + 90us);
  auto u = gpu::suspicionOf({bystander.evidence, unmarked.evidence});
  EXPECT_EQ(u.culprit, std::optional<uint64_t>(1));
  EXPECT_FALSE(u.clear);
}

TEST(FaultEvidence, CodeIsProvenByACompletedSyncThatCoveredIt) {
  FaultEvidence e(1, "a");
  e.noteLaunch();
  e.noteCode(5);
  EXPECT_TRUE(e.runsUnprovenCode());
  uint64_t covered = e.launchesSoFar();
  e.noteLaunch();
  e.noteCode(6);  // after the sync was issued
  e.noteSettled(covered);
  EXPECT_TRUE(e.runsUnprovenCode());  // 6 is still unproven
  e.noteSettled(e.launchesSoFar());
  EXPECT_FALSE(e.runsUnprovenCode());
  e.noteLaunch();
  e.noteCode(5);  // proven before
  e.noteLaunch();
  e.noteCode(6);
  EXPECT_FALSE(e.runsUnprovenCode());
}

// The misses seen on the H200: a bystander's 2 ms kernel had started 20-100 µs before another
// tenant's kernel faulted; both were running when the context stopped, so no mark tells them
// apart. The bystander's kernels had finished in earlier rounds; the faulting one never had.
TEST(Suspicion, OfWorkStartedTogetherTheCodeNeverSeenToFinishIsBlamed) {
  auto t0 = FaultEvidence::Clock::now();
  auto bystander = std::make_shared<FaultEvidence>(1, "bystander");
  auto faulty = std::make_shared<FaultEvidence>(2, "faulty");
  bystander->noteLaunch(t0 - 10ms);
  bystander->noteCode(7);
  bystander->noteSettled(bystander->launchesSoFar());  // an earlier round
  bystander->noteLaunch(t0);
  bystander->noteCode(7);
  faulty->noteLaunch(t0 + 50us);
  faulty->noteCode(7);  // same handle value, another tenant's kernel: proven only for its own
  auto s = gpu::suspicionOf({bystander, faulty});
  EXPECT_EQ(s.culprit, std::optional<uint64_t>(2));
  EXPECT_FALSE(s.clear);  // an inference, not counted towards a quarantine

  // Work started far apart: the older is blamed whatever its code.
  auto late = std::make_shared<FaultEvidence>(3, "late");
  late->noteLaunch(t0 + 5ms);
  late->noteCode(1);
  auto apart = gpu::suspicionOf({bystander, late});
  EXPECT_EQ(apart.culprit, std::optional<uint64_t>(1));
  EXPECT_TRUE(apart.clear);
}

TEST(StickyErrors, KernelFaultsAreStickyApiErrorsAreNot) {
  EXPECT_TRUE(gpu::isStickyError(CUDA_ERROR_ASSERT));
  EXPECT_TRUE(gpu::isStickyError(CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_FALSE(gpu::isStickyError(CUDA_ERROR_INVALID_VALUE));
  EXPECT_FALSE(gpu::isStickyError(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_FALSE(gpu::isStickyError(CUDA_SUCCESS));
}

// A monitor without GPUs: statuses decide alone.
struct MonitorFixture : ::testing::Test {
  std::mutex mutex;
  std::condition_variable handed;
  std::optional<FaultVerdict> received;
  FaultMonitor monitor{FaultMonitor::Options{0, std::chrono::milliseconds(10)}, {}, [this](const FaultVerdict& v) {
                         std::lock_guard lock(mutex);
                         received = v;
                         handed.notify_all();
                       }};

  bool waitForHandOver() {
    std::unique_lock lock(mutex);
    return handed.wait_for(lock, 2s, [&] { return received.has_value(); });
  }
};

TEST_F(MonitorFixture, CulpritKeepsTheNativeErrorOthersGetTheResetError) {
  auto culprit = monitor.enroll(7, "faulty");
  auto bystander = monitor.enroll(8, "innocent");
  culprit->noteLaunch();
  EXPECT_EQ(monitor.statusFor(8, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);  // not sticky: no fault
  EXPECT_FALSE(monitor.verdict().has_value());

  EXPECT_EQ(monitor.statusFor(8, CUDA_ERROR_ASSERT), gpu::kContextResetError);
  EXPECT_EQ(monitor.statusFor(7, CUDA_ERROR_ASSERT), CUDA_ERROR_ASSERT);
  // Later failures of any kind are the fault's; calls that needed no GPU still succeed.
  EXPECT_EQ(monitor.statusFor(7, CUDA_ERROR_INVALID_HANDLE), CUDA_ERROR_ASSERT);
  EXPECT_EQ(monitor.statusFor(8, CUDA_ERROR_INVALID_HANDLE), gpu::kContextResetError);
  EXPECT_EQ(monitor.statusFor(8, CUDA_SUCCESS), CUDA_SUCCESS);

  ASSERT_TRUE(waitForHandOver());
  EXPECT_EQ(received->code, CUDA_ERROR_ASSERT);
  ASSERT_EQ(received->culprits.size(), 1u);
  EXPECT_EQ(received->culprits.at(7), "faulty");
  EXPECT_EQ(received->tenantsAffected, 2u);
  EXPECT_NE(received->reason.find("faulty"), std::string::npos);
}

TEST_F(MonitorFixture, FirstDeclarationWins) {
  monitor.enroll(1, "a");
  monitor.declare(CUDA_ERROR_ILLEGAL_ADDRESS, 1, "first");
  monitor.declare(CUDA_ERROR_ASSERT, std::nullopt, "second");
  ASSERT_TRUE(monitor.verdict().has_value());
  EXPECT_EQ(monitor.verdict()->code, CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(monitor.statusFor(1, CUDA_ERROR_ASSERT), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST(FaultMonitorTimeout, WorkUnfinishedPastTheLimitIsAFaultOfItsTenant) {
  std::promise<FaultVerdict> got;
  FaultMonitor monitor(FaultMonitor::Options{0.05, std::chrono::milliseconds(10)}, {},
                       [&](const FaultVerdict& v) { got.set_value(v); });
  auto quick = monitor.enroll(1, "quick");
  auto stuck = monitor.enroll(2, "stuck");
  stuck->noteLaunch();
  quick->noteLaunch();
  quick->noteSettled(quick->launchesSoFar());
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(2s), std::future_status::ready);
  FaultVerdict v = future.get();
  EXPECT_EQ(v.code, CUDA_ERROR_LAUNCH_TIMEOUT);
  ASSERT_EQ(v.culprits.size(), 1u);
  EXPECT_EQ(v.culprits.at(2), "stuck");
  EXPECT_EQ(monitor.statusFor(1, CUDA_ERROR_INVALID_VALUE), gpu::kContextResetError);
}

TEST(FaultMonitorTimeout, OffByDefault) {
  std::atomic<bool> called{false};
  FaultMonitor monitor(FaultMonitor::Options{0, std::chrono::milliseconds(5)}, {},
                       [&](const FaultVerdict&) { called = true; });
  monitor.enroll(1, "slow")->noteLaunch();
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(called.load());
}

TEST(FaultMonitorProbe, OnlyAGpuNoTenantLaunchedOnForAnIntervalIsProbed) {
  std::map<uint64_t, std::shared_ptr<FaultEvidence>> tenants;
  const auto now = FaultEvidence::Clock::now();
  EXPECT_TRUE(gpu::quietFor(tenants, now, 100ms)) << "no tenant at all";
  tenants[1] = std::make_shared<FaultEvidence>(1, "connected, never launched");
  EXPECT_TRUE(gpu::quietFor(tenants, now, 100ms));
  tenants[2] = std::make_shared<FaultEvidence>(2, "launched a while ago");
  tenants[2]->noteLaunch(now - 150ms);
  EXPECT_TRUE(gpu::quietFor(tenants, now, 100ms));
  tenants[3] = std::make_shared<FaultEvidence>(3, "launching");
  tenants[3]->noteLaunch(now - 50ms);
  EXPECT_FALSE(gpu::quietFor(tenants, now, 100ms)) << "a launch 50 ms ago meets a sticky error itself";
  EXPECT_TRUE(gpu::quietFor(tenants, now + 60ms, 100ms));
}

TEST(FaultHistoryTest, RefusesATenantThatKeepsFaultingForAWhile) {
  FaultHistory history({2, std::chrono::seconds(60), std::chrono::seconds(300)});
  auto t0 = FaultHistory::Clock::now();
  history.record({"bad"}, "one", t0);
  EXPECT_FALSE(history.refusedUntil("bad", t0 + 1s).has_value());
  history.record({"bad"}, "two", t0 + 10s);
  auto until = history.refusedUntil("bad", t0 + 11s);
  ASSERT_TRUE(until.has_value());
  EXPECT_EQ(*until, t0 + 10s + 300s);
  EXPECT_FALSE(history.refusedUntil("bad", t0 + 311s).has_value());  // served its time
  EXPECT_FALSE(history.refusedUntil("good", t0 + 11s).has_value());
}

TEST(FaultHistoryTest, FaultsFarApartDoNotQuarantine) {
  FaultHistory history({2, std::chrono::seconds(60), std::chrono::seconds(300)});
  auto t0 = FaultHistory::Clock::now();
  history.record({"bad"}, "one", t0);
  history.record({"bad"}, "two", t0 + 120s);
  EXPECT_FALSE(history.refusedUntil("bad", t0 + 121s).has_value());
}

TEST(FaultHistoryTest, SeveralSuspectsCountAgainstNobody) {
  FaultHistory history({1, std::chrono::seconds(60), std::chrono::seconds(300)});
  auto t0 = FaultHistory::Clock::now();
  history.record({"a", "b"}, "unclear", t0);
  EXPECT_EQ(history.total(), 1u);
  EXPECT_FALSE(history.refusedUntil("a", t0).has_value());
  EXPECT_TRUE(history.faultsByTenant().empty());
}

TEST(FaultHistoryTest, SurvivesStartingOver) {
  FaultHistory before({2, std::chrono::seconds(60), std::chrono::seconds(300)});
  auto t0 = FaultHistory::Clock::now();
  before.record({"odd name\nwith newline"}, "first fault", t0);
  before.record({"odd name\nwith newline"}, "second fault", t0 + 1s);
  FaultHistory after({2, std::chrono::seconds(60), std::chrono::seconds(300)});
  ASSERT_TRUE(after.parse(before.serialize()));
  EXPECT_EQ(after.total(), 2u);
  EXPECT_EQ(after.lastSummary(), "second fault");
  EXPECT_EQ(after.faultsByTenant().at("odd name\nwith newline"), 2u);
  EXPECT_TRUE(after.refusedUntil("odd name\nwith newline", t0 + 2s).has_value());
}

TEST(FaultHistoryTest, MalformedTextAddsNothing) {
  FaultHistory history;
  EXPECT_FALSE(history.parse("total x\n"));
  EXPECT_FALSE(history.parse("tenant zz 1\n"));
  EXPECT_FALSE(history.parse("bogus 1\n"));
  EXPECT_EQ(history.total(), 0u);
}

}  // namespace
}  // namespace tally::server
