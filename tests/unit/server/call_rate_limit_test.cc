#include "server/session/call_rate_limit.h"

#include <gtest/gtest.h>

namespace tally::server::session {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TEST(CallRateLimit, UnlimitedNeverWaits) {
  CallRateLimit limit(0);
  auto t = CallRateLimit::Clock::now();
  for (int i = 0; i < 100000; ++i) EXPECT_EQ(limit.delayFor(t), nanoseconds(0));
}

TEST(CallRateLimit, ABurstOfOneSecondThenTheRate) {
  auto t0 = CallRateLimit::Clock::time_point{} + std::chrono::seconds(100);
  CallRateLimit limit(1000, t0);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(limit.delayFor(t0), nanoseconds(0)) << i;
  // Over the burst: each further call waits one more millisecond.
  EXPECT_EQ(limit.delayFor(t0), milliseconds(1));
  EXPECT_EQ(limit.delayFor(t0), milliseconds(2));
  // Half a second later 500 tokens have come back; two were owed.
  auto t1 = t0 + milliseconds(500);
  for (int i = 0; i < 498; ++i) ASSERT_EQ(limit.delayFor(t1), nanoseconds(0)) << i;
  EXPECT_GT(limit.delayFor(t1), nanoseconds(0));
}

TEST(CallRateLimit, IdleTimeRefillsNoMoreThanOneSecond) {
  auto t0 = CallRateLimit::Clock::time_point{} + std::chrono::seconds(100);
  CallRateLimit limit(10, t0);
  for (int i = 0; i < 10; ++i) limit.delayFor(t0);
  auto later = t0 + std::chrono::hours(1);
  for (int i = 0; i < 10; ++i) ASSERT_EQ(limit.delayFor(later), nanoseconds(0));
  EXPECT_GT(limit.delayFor(later), nanoseconds(0));
}

}  // namespace
}  // namespace tally::server::session
