// The HP launch thread's hand-off (session/launch_thread.h): jobs run in the order queued, drain
// waits for all of them, a full ring holds the producer back, a sleeping thread wakes for a job,
// and the destructor runs what is still queued.
#include "server/session/launch_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tally::server::session {
namespace {

using namespace std::chrono_literals;

// Jobs record themselves here; only the launch thread appends, the test reads after drain().
std::vector<uint64_t> g_ran;
std::atomic<bool> g_hold{false};
std::atomic<int> g_holding{0};

struct Numbered {
  uint64_t number;
  bool hold;  // wait for g_hold to drop first
};

void runNumbered(Numbered& job) {
  if (job.hold) {
    g_holding.fetch_add(1);
    while (g_hold.load()) std::this_thread::sleep_for(100us);
  }
  g_ran.push_back(job.number);
}

class LaunchThreadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_ran.clear();
    g_hold = false;
    g_holding = 0;
  }
};

TEST_F(LaunchThreadTest, RunsJobsInOrderAndDrainWaitsForAll) {
  LaunchThread thread(1, 50us);
  constexpr uint64_t kJobs = 10000;  // many times the ring
  for (uint64_t i = 0; i < kJobs; ++i) thread.submit<Numbered, runNumbered>({i, i % 997 == 0});
  thread.drain();
  EXPECT_FALSE(thread.busy());
  ASSERT_EQ(g_ran.size(), kJobs);
  for (uint64_t i = 0; i < kJobs; ++i) ASSERT_EQ(g_ran[i], i) << "job " << i << " ran out of order";
  EXPECT_EQ(thread.jobsRun(), kJobs);
}

TEST_F(LaunchThreadTest, FullRingHoldsTheProducerBack) {
  LaunchThread thread(2, 10us);
  g_hold = true;
  thread.submit<Numbered, runNumbered>({0, true});
  while (g_holding.load() == 0) std::this_thread::sleep_for(100us);
  // The first job runs (held) and keeps its slot until it is done; the ring takes kSlots - 1
  // more; the next submit must wait.
  for (uint64_t i = 1; i < LaunchThread::kSlots; ++i) thread.submit<Numbered, runNumbered>({i, false});
  std::atomic<bool> lastQueued{false};
  std::thread producer([&] {
    thread.submit<Numbered, runNumbered>({LaunchThread::kSlots, false});
    lastQueued = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(lastQueued.load()) << "a job was queued into a full ring";
  EXPECT_TRUE(thread.busy());
  g_hold = false;
  producer.join();
  EXPECT_TRUE(lastQueued.load());
  thread.drain();
  ASSERT_EQ(g_ran.size(), LaunchThread::kSlots + 1);
  for (uint64_t i = 0; i < g_ran.size(); ++i) EXPECT_EQ(g_ran[i], i);
}

TEST_F(LaunchThreadTest, SleepsWhenIdleAndWakesForTheNextJob) {
  LaunchThread thread(3, 0us);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!thread.asleep() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(thread.asleep()) << "an idle launch thread with no spin never slept";
  thread.submit<Numbered, runNumbered>({7, false});
  thread.drain();
  ASSERT_EQ(g_ran.size(), 1u);
  EXPECT_EQ(g_ran[0], 7u);
  thread.wake();  // waking a thread with nothing queued runs nothing
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(g_ran.size(), 1u);
}

TEST_F(LaunchThreadTest, DestructorRunsWhatIsStillQueued) {
  {
    LaunchThread thread(4, 10us);
    g_hold = true;
    thread.submit<Numbered, runNumbered>({0, true});
    for (uint64_t i = 1; i < 20; ++i) thread.submit<Numbered, runNumbered>({i, false});
    std::thread release([] {
      std::this_thread::sleep_for(10ms);
      g_hold = false;
    });
    release.detach();
  }
  ASSERT_EQ(g_ran.size(), 20u);
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(g_ran[i], i);
}

}  // namespace
}  // namespace tally::server::session
