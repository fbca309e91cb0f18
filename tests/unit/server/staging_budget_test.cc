#include "server/gpu/staging_pool.h"

#include <gtest/gtest.h>

#include <thread>

namespace tally::server::gpu {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(StagingBudget, UnderTheSoftLimitNothingWaits) {
  StagingBudget budget(100, 800, milliseconds(5000));
  auto start = Clock::now();
  EXPECT_TRUE(budget.acquire(60));
  EXPECT_TRUE(budget.acquire(40));
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(budget.held(), 100u);
}

TEST(StagingBudget, OneRequestLargerThanTheBudgetPassesWhenNothingIsHeld) {
  StagingBudget budget(100, 800, milliseconds(5000));
  EXPECT_TRUE(budget.acquire(300));
  EXPECT_EQ(budget.held(), 300u);
  budget.release(300);
  EXPECT_EQ(budget.held(), 0u);
}

TEST(StagingBudget, OverTheSoftLimitWaitsForItsOwnBuffersToComeBack) {
  StagingBudget budget(100, 800, milliseconds(5000));
  ASSERT_TRUE(budget.acquire(100));
  std::thread giver([&] {
    std::this_thread::sleep_for(milliseconds(100));
    budget.release(100);
  });
  auto start = Clock::now();
  EXPECT_TRUE(budget.acquire(50));
  auto waited = Clock::now() - start;
  giver.join();
  EXPECT_GE(waited, milliseconds(90));     // it waited for the release ...
  EXPECT_LT(waited, milliseconds(4000));   // ... not for the whole bound
  EXPECT_EQ(budget.held(), 50u);
}

TEST(StagingBudget, TheWaitIsBoundedThenItGoesOverUpToTheHardLimit) {
  StagingBudget budget(100, 250, milliseconds(50));
  ASSERT_TRUE(budget.acquire(100));
  auto start = Clock::now();
  EXPECT_TRUE(budget.acquire(100));  // nothing comes back: goes over after the wait
  EXPECT_GE(Clock::now() - start, milliseconds(45));
  EXPECT_EQ(budget.held(), 200u);
  EXPECT_FALSE(budget.acquire(100));  // 300 would pass the hard limit
  EXPECT_EQ(budget.held(), 200u);
}

}  // namespace
}  // namespace tally::server::gpu
