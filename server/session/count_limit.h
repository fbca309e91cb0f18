// A per-tenant cap on how many of one kind of object (streams, events, modules, host mappings)
// a tenant holds at once. Every object costs tallyd or the shared context something (driver
// handles, pinned pages, address space), so without a cap one tenant could exhaust them for all.
// Logs once per tenant and kind when it first refuses, so a looping client cannot flood the log.
#pragma once

#include "server/session/auth.h"

#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace tally::server::session {

// "tenant 7 (inference-1)": how tables name their tenant in log lines.
inline std::string tenantLabel(uint64_t id, const std::string& name) {
  return "tenant " + std::to_string(id) + " (" + name + ")";
}

class CountLimit {
 public:
  // `what`: the plural noun for the log line ("streams"); `max` 0 = unlimited.
  CountLimit(const char* what, uint64_t max, std::string tenant) : what_(what), max_(max), tenant_(std::move(tenant)) {}

  // True if one more object keeps `held` within the cap.
  bool allowsOneMore(size_t held) {
    if (withinStreamLimit(held, max_)) return true;
    if (!logged_) {
      spdlog::warn("{} reached its limit of {} {}", tenant_, max_, what_);
      logged_ = true;
    }
    return false;
  }
  uint64_t max() const { return max_; }

 private:
  const char* what_;
  uint64_t max_;
  std::string tenant_;
  bool logged_ = false;
};

}  // namespace tally::server::session
