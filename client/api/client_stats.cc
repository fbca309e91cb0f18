// What this process sent to tallyd, for benchmarks: how many calls per training step, how many of
// them waited for a reply, how many bytes. Read in-process through tallyClientStats (Python:
// ctypes.CDLL(None).tallyClientStats), or as JSON written at exit to TALLY_CLIENT_STATS.
#include "client/api/api_util.h"

#include <cstdio>
#include <cstdlib>

namespace {

using tally::client::ClientRuntime;

// out[0] messages, out[1] round trips, out[2] bytes; false before the first connection.
bool snapshot(uint64_t out[3]) {
  ClientRuntime& rt = ClientRuntime::get();
  if (rt.ready() != CUDA_SUCCESS) return false;
  out[0] = rt.connection().messagesSent();
  out[1] = rt.connection().roundTrips();
  out[2] = rt.connection().bytesSent();
  return true;
}

void writeStatsFile() {
  const char* path = std::getenv("TALLY_CLIENT_STATS");
  uint64_t s[3];
  if (path == nullptr || *path == '\0' || !snapshot(s)) return;
  // word_completions: round trips their completion word ended (Connection::wordCompletions).
  if (FILE* f = std::fopen(path, "w")) {
    std::fprintf(f, "{\"messages\": %llu, \"round_trips\": %llu, \"bytes_sent\": %llu, \"word_completions\": %llu}\n",
                 static_cast<unsigned long long>(s[0]), static_cast<unsigned long long>(s[1]),
                 static_cast<unsigned long long>(s[2]),
                 static_cast<unsigned long long>(ClientRuntime::get().connection().wordCompletions()));
    std::fclose(f);
  }
}

// Registered when the library loads, so the file is written however the process exits normally.
const bool kStatsAtExit = std::getenv("TALLY_CLIENT_STATS") != nullptr && std::atexit(writeStatsFile) == 0;

}  // namespace

// Not a CUDA API: Tally's own, exported under TALLY_DRIVER. Returns 0, or -1 when not connected.
TALLY_API int tallyClientStats(uint64_t* out) {
  if (out == nullptr) return -1;
  return snapshot(out) ? 0 : -1;
}
