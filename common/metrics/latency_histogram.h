// A lock-free latency histogram for counters that one thread writes and another reads
// (tallyctl, the Prometheus endpoint): buckets < 10 µs, < 100 µs, < 1 ms, < 10 ms, longer.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tally::metrics {

class LatencyHistogram {
 public:
  static constexpr size_t kBuckets = 5;
  // Upper bounds in seconds, as Prometheus `le` labels.
  static constexpr std::array<const char*, kBuckets> kUpperBounds{"1e-05", "0.0001", "0.001", "0.01", "+Inf"};

  void record(double micros) {
    constexpr auto relaxed = std::memory_order_relaxed;
    size_t bucket = micros < 10 ? 0 : micros < 100 ? 1 : micros < 1000 ? 2 : micros < 10000 ? 3 : 4;
    buckets_[bucket].fetch_add(1, relaxed);
    micros_.fetch_add(static_cast<uint64_t>(micros), relaxed);
    count_.fetch_add(1, relaxed);
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  uint64_t totalMicros() const { return micros_.load(std::memory_order_relaxed); }
  uint64_t bucket(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> micros_{0};
  std::atomic<uint64_t> count_{0};
};

}  // namespace tally::metrics
