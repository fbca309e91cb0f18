#include "client/entry/not_supported.h"

#include <spdlog/spdlog.h>

#include <mutex>
#include <string>
#include <unordered_set>

namespace tally::client {
namespace {

struct ReportState {
  std::mutex mutex;
  std::unordered_set<std::string> reported;
};

// Intentionally leaked: stubs may be called from other libraries' static
// destructors or atexit handlers after this TU's statics would be destroyed.
ReportState& state() {
  static ReportState* s = new ReportState();
  return *s;
}

}  // namespace

void reportNotSupported(const char* apiName) noexcept {
  try {
    const char* name = apiName != nullptr ? apiName : "(unnamed API)";
    ReportState& s = state();
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      if (!s.reported.emplace(name).second) return;
    }
    // Logged outside the lock: a sink that re-enters a stub cannot deadlock.
    spdlog::warn("tally: {} is not supported by the Tally client; returning NotSupported", name);
  } catch (...) {
    // Out of memory or a failing sink: the caller still gets its NotSupported code.
  }
}

bool wasReportedNotSupported(std::string_view apiName) noexcept {
  try {
    ReportState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    return s.reported.count(std::string(apiName)) != 0;
  } catch (...) {
    return false;
  }
}

}  // namespace tally::client
