// A tenant's calls per second (tenant rule `max_calls_per_second`): a token bucket holding one
// second of calls. A tenant over its rate is slowed down, not refused: its session thread waits
// before dispatching the next call, and its client simply sees slower calls. Used by the
// session thread only.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace tally::server::session {

class CallRateLimit {
 public:
  using Clock = std::chrono::steady_clock;

  // 0: unlimited.
  explicit CallRateLimit(uint64_t callsPerSecond, Clock::time_point now = Clock::now())
      : rate_(double(callsPerSecond)), tokens_(double(callsPerSecond)), last_(now) {}

  bool limited() const { return rate_ > 0; }

  // Takes one call's token at `now`; returns how long the caller must wait before the call.
  std::chrono::nanoseconds delayFor(Clock::time_point now) {
    if (!limited()) return std::chrono::nanoseconds(0);
    double elapsed = std::chrono::duration<double>(now - last_).count();
    last_ = std::max(last_, now);
    tokens_ = std::min(rate_, tokens_ + std::max(0.0, elapsed) * rate_) - 1;
    if (tokens_ >= 0) return std::chrono::nanoseconds(0);
    return std::chrono::nanoseconds(static_cast<int64_t>(-tokens_ / rate_ * 1e9));
  }

 private:
  double rate_;
  double tokens_;  // may go negative: calls already promised a later slot
  Clock::time_point last_;
};

}  // namespace tally::server::session
