// Per-call timestamps, off by default: where a synchronous call's time goes between the client
// and tallyd. Each side records (tenant, call id, call kind, stage, CLOCK_MONOTONIC ns) for the
// stages it sees; on one host the two clocks are the same, so bench/trace/trace_report.py joins
// the two files by (tenant, call id) into per-stage latencies:
//   client  enter (the application's call) → send → sent (socket write) … replied (receiver thread
//           has the reply) → woken (caller runs) → returned (back in the application)
//   tallyd  read (call decoded) → submitted (work queued on the GPU) → handled (handler done)
//           → reply (reply queued)
// Enabled by TALLY_TRACE=FILE (client) and --trace-calls FILE / trace_calls (tallyd). When off,
// recording is one relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tally::trace {

enum class Stage : uint8_t { kSend, kSent, kReplied, kWoken, kRead, kHandled, kReply, kEnter, kReturned, kSubmitted };
const char* stageName(Stage s);

// Opens `path` for appending; later events go there. False (and tracing stays off) if it cannot.
bool enableCallTrace(const std::string& path, const char* side);
bool callTraceEnabled();
// Records one event; the tenant is the id tallyd gave the connection.
void recordCall(uint64_t tenant, uint64_t callId, int32_t kind, Stage stage);

// Brackets one call of the application (client side): if it waited for tallyd, its round trip
// gets `enter` and `returned` stamps, so the client's own work before the send and after the
// wake-up shows. Nested scopes (one entry point calling another) count as the outer one.
class ApplicationCallScope {
 public:
  ApplicationCallScope();
  ~ApplicationCallScope();
  ApplicationCallScope(const ApplicationCallScope&) = delete;
  ApplicationCallScope& operator=(const ApplicationCallScope&) = delete;

 private:
  bool counted_ = false;  // tracing was on when the call began: the thread's scope state is ours
};
// The round trip the current ApplicationCallScope of this thread made (the last one, if several).
void noteRoundTrip(uint64_t tenant, uint64_t callId, int32_t kind);

// Writes what is buffered (also done every few thousand events and at exit).
void flushCallTrace();

}  // namespace tally::trace
