#include "common/metrics/latency_histogram.h"

#include <gtest/gtest.h>

namespace tally::metrics {
namespace {

TEST(LatencyHistogram, BucketsAtTheDecades) {
  LatencyHistogram h;
  for (double micros : {9.9, 10.0, 99.0, 100.0, 999.0, 1000.0, 9999.0, 10000.0, 1e6}) h.record(micros);
  EXPECT_EQ(h.bucket(0), 1u);  // < 10 µs
  EXPECT_EQ(h.bucket(1), 2u);  // [10, 100)
  EXPECT_EQ(h.bucket(2), 2u);  // [100 µs, 1 ms)
  EXPECT_EQ(h.bucket(3), 2u);  // [1, 10) ms
  EXPECT_EQ(h.bucket(4), 2u);  // longer
  EXPECT_EQ(h.count(), 9u);
  EXPECT_EQ(h.totalMicros(), 9u + 10 + 99 + 100 + 999 + 1000 + 9999 + 10000 + 1000000);
  EXPECT_STREQ(LatencyHistogram::kUpperBounds[LatencyHistogram::kBuckets - 1], "+Inf");
}

}  // namespace
}  // namespace tally::metrics
