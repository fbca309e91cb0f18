#include "common/trace/call_trace.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>
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

constexpr size_t kFlushEvery = 4096;

// Recording threads only append to a buffer; a full one goes to the writer thread, so a traced
// call never waits for the file (writing 4,096 lines took ~1.8 ms, which showed up in the traces
// of tallyd's launches as stalls every ~100 ms).
struct Recorder {
  std::atomic<bool> enabled{false};
  std::mutex mutex;  // events, full, spare
  std::condition_variable filled;
  std::vector<Event> events;
  std::deque<std::vector<Event>> full;   // waiting for the writer
  std::vector<std::vector<Event>> spare;  // written, kept for reuse (no allocation on record)
  std::mutex fileMutex;                   // one writer at a time: the thread, or the flush at exit
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

// Under r.fileMutex.
void write(Recorder& r, const std::vector<Event>& events) {
  for (const Event& e : events) {
    std::fprintf(r.file, "%s\t%llu\t%llu\t%d\t%s\t%llu\n", r.side, static_cast<unsigned long long>(e.tenant),
                 static_cast<unsigned long long>(e.id), e.kind, stageName(e.stage),
                 static_cast<unsigned long long>(e.ns));
  }
  std::fflush(r.file);
}

// Under r.mutex: the current buffer joins the full ones, and a spare one takes its place.
void retireBuffer(Recorder& r) {
  r.full.push_back(std::move(r.events));
  if (r.spare.empty()) {
    r.events = {};
    r.events.reserve(kFlushEvery);
  } else {
    r.events = std::move(r.spare.back());
    r.spare.pop_back();
  }
}

// A batch is taken and written under fileMutex, so the flush at exit (which takes it first)
// never misses one the writer holds.
[[noreturn]] void writerLoop(Recorder& r) {
  for (;;) {
    {
      std::unique_lock lock(r.mutex);
      r.filled.wait(lock, [&] { return !r.full.empty(); });
    }
    std::lock_guard file(r.fileMutex);
    std::vector<Event> batch;
    {
      std::lock_guard lock(r.mutex);
      if (r.full.empty()) continue;  // the flush at exit took it
      batch = std::move(r.full.front());
      r.full.pop_front();
    }
    write(r, batch);
    batch.clear();
    std::lock_guard lock(r.mutex);
    r.spare.push_back(std::move(batch));
  }
}

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
  r.spare.resize(2);
  for (auto& buffer : r.spare) buffer.reserve(kFlushEvery);
  std::thread([&r] { writerLoop(r); }).detach();  // lives as long as the (leaked) recorder
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
  if (r.events.size() < kFlushEvery) return;
  retireBuffer(r);
  r.filled.notify_one();
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
  std::lock_guard file(r.fileMutex);
  std::deque<std::vector<Event>> left;
  {
    std::lock_guard lock(r.mutex);
    if (r.file == nullptr) return;
    retireBuffer(r);
    left.swap(r.full);
  }
  for (const auto& batch : left) write(r, batch);
}

}  // namespace tally::trace
