#include "common/trace/call_trace.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <vector>

namespace tally::trace {
namespace {

struct Event {
  uint64_t tenant;
  uint64_t id;
  int32_t kind;
  Stage stage;
  uint64_t ns;
};

struct Recorder {
  std::atomic<bool> enabled{false};
  std::mutex mutex;
  std::vector<Event> events;
  FILE* file = nullptr;
  const char* side = "";
};

// Leaked: events may be recorded from threads that outlive static destruction.
Recorder& recorder() {
  static Recorder* r = new Recorder();
  return *r;
}

uint64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void writeLocked(Recorder& r) {
  for (const Event& e : r.events) {
    std::fprintf(r.file, "%s\t%llu\t%llu\t%d\t%s\t%llu\n", r.side, static_cast<unsigned long long>(e.tenant),
                 static_cast<unsigned long long>(e.id), e.kind, stageName(e.stage),
                 static_cast<unsigned long long>(e.ns));
  }
  r.events.clear();
  std::fflush(r.file);
}

constexpr size_t kFlushEvery = 4096;

}  // namespace

const char* stageName(Stage s) {
  switch (s) {
    case Stage::kSend: return "send";
    case Stage::kSent: return "sent";
    case Stage::kReplied: return "replied";
    case Stage::kWoken: return "woken";
    case Stage::kRead: return "read";
    case Stage::kHandled: return "handled";
    case Stage::kReply: return "reply";
    case Stage::kEnter: return "enter";
    case Stage::kReturned: return "returned";
    case Stage::kSubmitted: return "submitted";
  }
  return "?";
}

bool enableCallTrace(const std::string& path, const char* side) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (r.file != nullptr) return true;
  r.file = std::fopen(path.c_str(), "a");
  if (r.file == nullptr) return false;
  r.side = side;
  r.events.reserve(kFlushEvery);
  std::atexit(flushCallTrace);
  r.enabled.store(true, std::memory_order_release);
  return true;
}

bool callTraceEnabled() { return recorder().enabled.load(std::memory_order_relaxed); }

namespace {

void record(const Event& e) {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  r.events.push_back(e);
  if (r.events.size() >= kFlushEvery) writeLocked(r);
}

struct ScopeState {
  unsigned depth = 0;
  uint64_t enterNs = 0;
  uint64_t tenant = 0;
  uint64_t callId = 0;
  int32_t kind = -1;
};
thread_local ScopeState scope;

}  // namespace

void recordCall(uint64_t tenant, uint64_t callId, int32_t kind, Stage stage) {
  if (!callTraceEnabled()) return;
  record(Event{tenant, callId, kind, stage, nowNs()});
}

ApplicationCallScope::ApplicationCallScope() {
  if (!callTraceEnabled()) return;
  counted_ = true;
  if (scope.depth++ != 0) return;
  scope.enterNs = nowNs();
  scope.callId = 0;
}

ApplicationCallScope::~ApplicationCallScope() {
  if (!counted_ || --scope.depth != 0 || scope.callId == 0) return;
  record(Event{scope.tenant, scope.callId, scope.kind, Stage::kEnter, scope.enterNs});
  record(Event{scope.tenant, scope.callId, scope.kind, Stage::kReturned, nowNs()});
}

void noteRoundTrip(uint64_t tenant, uint64_t callId, int32_t kind) {
  if (scope.depth == 0) return;
  scope.tenant = tenant;
  scope.callId = callId;
  scope.kind = kind;
}

void flushCallTrace() {
  Recorder& r = recorder();
  std::lock_guard lock(r.mutex);
  if (r.file != nullptr) writeLocked(r);
}

}  // namespace tally::trace
