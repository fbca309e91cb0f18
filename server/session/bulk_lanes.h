// Bulk lanes: extra TCP/TLS connections of one tenant that carry only the bytes of large copies.
// One connection is one thread per side, and over TLS one thread seals or opens every byte in
// series; lanes let several threads on each side move one copy's bytes at once. The tenant's
// own connection still carries every call, in order; a lane carries LaneData (host to device)
// and HostData (device to host) frames naming the copy by its token.
//
// Host to device: the tenant's session thread asks for the copy's bytes range by range
// (receive), in the order it consumes them; each lane's thread reads its frames into the range
// that is waiting for them. A lane whose bytes belong to a later range waits for it: the client
// sends every copy's bytes in offset order on each lane, so that wait never blocks the range
// being filled. Device to host: send() splits staged bytes across the lanes' outboxes, whose
// writer threads seal and send them side by side.
//
// A lane that breaks, lies (bytes outside the range, twice the same bytes, a copy already
// done) or makes the tenant wait past kWait fails the lanes, and the tenant with them.
#pragma once

#include "common/frame/socket_io.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tally::server::session {

class Outbox;

class BulkLanes {
 public:
  static constexpr unsigned kMaxLanes = 8;
  static constexpr std::chrono::seconds kWait{60};  // for a lane's bytes, or for their call
  using Key = std::array<uint8_t, 32>;

  // `tls`/`tlsSubject`: the tenant's own connection, which every lane must match.
  // `wait`: how long the session waits for bytes, and a lane for their call (tests shorten it).
  BulkLanes(uint64_t tenantId, std::string tenantName, unsigned count, bool tls, std::string tlsSubject,
            std::chrono::milliseconds wait = kWait);
  ~BulkLanes();
  BulkLanes(const BulkLanes&) = delete;
  BulkLanes& operator=(const BulkLanes&) = delete;

  uint64_t tenantId() const { return tenantId_; }
  unsigned count() const { return count_; }
  const Key& key() const { return key_; }

  // A lane connection asks to join: "" when it is now lane `index`, else why it is refused.
  // `fd` is the lane's socket (shut down when the lanes close).
  std::string join(unsigned index, std::span<const uint8_t> key, bool tls, const std::string& tlsSubject,
                   std::shared_ptr<Outbox> outbox, int fd);
  // Runs lane `index` on the calling thread (its connection's): reads LaneData into the ranges
  // the session asks for, until the lane closes or the lanes fail.
  void serve(unsigned index, frame::StreamReader& reader, const frame::FrameLimits& limits);

  // Every lane joined and none failed: device-to-host bytes may go this way.
  bool ready() const;
  // The session thread: bytes [offset, offset + size) of copy `token` (`total` bytes in all)
  // into `dst` (null: read and dropped). False once the lanes failed (failure() says why).
  bool receive(uint64_t token, uint64_t total, uint64_t offset, void* dst, size_t size);
  // Any thread: device-to-host bytes of `token` at `offset`, split across the lanes; `keepalive`
  // holds `data` until written. False (nothing sent) when the lanes are not ready.
  bool send(uint64_t token, uint64_t offset, const char* data, size_t size, const std::shared_ptr<void>& keepalive);

  // The tenant ended (or a lane failed): lanes are shut down and waits end.
  void close();
  std::string failure() const;

 private:
  // The range the session waits for: [lo, hi) of copy `token`.
  struct Range {
    bool open = false;
    uint64_t token = 0;
    uint64_t total = 0;
    uint64_t lo = 0;
    uint64_t hi = 0;
    char* dst = nullptr;
    uint64_t filled = 0;
    unsigned writers = 0;  // lane threads reading into dst right now
    std::vector<std::pair<uint64_t, uint64_t>> claimed;  // [from, to) taken by a lane: never twice
  };
  struct Lane {
    std::shared_ptr<Outbox> outbox;
    int fd = -1;
  };

  // Reads `size` bytes of copy `token` at `offset` from `reader` into the waiting ranges.
  bool deliver(unsigned index, uint64_t token, uint64_t offset, size_t size, frame::StreamReader& reader);
  // Waits for the range that takes `offset` of `token`; nullopt (lanes failed) or the bytes
  // it may take now, claimed. Lock held.
  std::optional<size_t> claim(unsigned index, uint64_t token, uint64_t offset, size_t size,
                              std::unique_lock<std::mutex>& lock);
  // `loud`: a warning (a lane that merely closed, as at a client's exit, is not one).
  void failLocked(std::string why, bool loud = true);

  const uint64_t tenantId_;
  const std::string tenantName_;
  const unsigned count_;
  const bool tls_;
  const std::string tlsSubject_;
  const std::chrono::milliseconds wait_;
  Key key_{};
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Lane> lanes_;
  unsigned joined_ = 0;
  Range range_;
  uint64_t lastToken_ = 0;  // the latest copy the session asked for: earlier ones are done
  uint64_t lastEnd_ = 0;    // ... and where its bytes asked for so far end
  bool failed_ = false;
  std::string failure_;
  unsigned nextLane_ = 0;  // device-to-host: where the next chunk goes
};

// Which tenants have lanes, so that a lane connection can find its tenant.
class LaneRegistry {
 public:
  void add(const std::shared_ptr<BulkLanes>& lanes);
  void remove(uint64_t tenantId);
  std::shared_ptr<BulkLanes> find(uint64_t tenantId) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, std::weak_ptr<BulkLanes>> byTenant_;
};

}  // namespace tally::server::session
