// Pageable copies over a Unix socket without pushing the bytes through it: a few slots of
// host memory shared with tallyd (memfd, registered with the driver there). The client copies
// a piece into a slot while tallyd DMAs the previous piece, so a blocking cudaMemcpy from or
// to pageable memory runs at memcpy speed rather than socket speed.
#pragma once

#include "client/transport/connection.h"

#include <cuda.h>

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace tally::client {

class ClientRuntime;

class StagingRing {
 public:
  static constexpr size_t kSlots = 4;
  static constexpr size_t kSlotBytes = 4u << 20;
  // Copies smaller than this go through the socket: one frame beats a slot round trip.
  static constexpr size_t kMinBytes = 64u << 10;

  // nullptr when tallyd cannot map the shared area (then copies use the socket).
  static std::unique_ptr<StagingRing> open(ClientRuntime& runtime);

  // Blocking copies; nullopt when another thread holds the ring (use the socket instead).
  std::optional<CUresult> toDevice(uint64_t dst, const char* src, size_t bytes, uint64_t stream);
  std::optional<CUresult> toHost(char* dst, uint64_t src, size_t bytes, uint64_t stream);

 private:
  StagingRing(ClientRuntime& runtime, char* base) : runtime_(runtime), base_(base) {}
  CUresult startPiece(size_t slot, bool toDevice, uint64_t device, size_t bytes, uint64_t stream);
  // Runs `start` for each slot-sized piece, keeping up to kSlots in flight; `landed` sees each
  // piece once tallyd finished it (false: its bytes could not be delivered).
  CUresult pipeline(size_t bytes, const std::function<CUresult(size_t, size_t, size_t)>& start,
                    const std::function<bool(size_t, size_t, size_t)>& landed);

  ClientRuntime& runtime_;
  char* base_;
  std::mutex mutex_;
  std::array<Connection::PendingCall, kSlots> inFlight_;
};

}  // namespace tally::client
