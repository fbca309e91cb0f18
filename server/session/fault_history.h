// Which tenants made the shared context fault, and when: what tallyctl and the metrics show, and
// what keeps a tenant that faults again and again from taking every other tenant down with it
// (fault_quarantine_after faults within fault_quarantine_window_s refuse it for
// fault_quarantine_s). tallyd starts over after a fault (gpu/fault_monitor.h); the history goes
// with it through the environment (serialize / parse), so it survives the restart.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tally::server::session {

struct QuarantineRule {
  unsigned after = 3;                        // faults within `window` that refuse a tenant; 0: never
  std::chrono::seconds window{600};
  std::chrono::seconds duration{300};        // how long it is refused
};

class FaultHistory {
 public:
  using Clock = std::chrono::system_clock;

  explicit FaultHistory(QuarantineRule rule = {}) : rule_(rule) {}
  FaultHistory(const FaultHistory& other);
  FaultHistory& operator=(const FaultHistory& other);

  // One fault of the shared context. `culprits`: the tenants surely to blame (empty when the blame
  // is uncertain); a fault counts against a tenant only when it was the sole one named.
  void record(const std::vector<std::string>& culprits, const std::string& summary, Clock::time_point at);
  // Until when `tenant` is refused, if it is now.
  std::optional<Clock::time_point> refusedUntil(const std::string& tenant, Clock::time_point now) const;

  uint64_t total() const;
  std::map<std::string, uint64_t> faultsByTenant() const;
  std::string lastSummary() const;

  // One line per entry; names are hex-encoded so any byte survives.
  std::string serialize() const;
  // Entries of `text` added to this history; false (nothing added) if it is malformed.
  bool parse(const std::string& text);

 private:
  QuarantineRule rule_;
  mutable std::mutex mutex_;
  uint64_t total_ = 0;
  std::string lastSummary_;
  std::map<std::string, std::vector<Clock::time_point>> faults_;  // per tenant, oldest first
};

}  // namespace tally::server::session
