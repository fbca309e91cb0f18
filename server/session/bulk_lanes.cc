#include "server/session/bulk_lanes.h"

#include "server/session/outbox.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>

namespace tally::server::session {

namespace {

// Device-to-host chunks: at least this many bytes each, so that a lane's frame costs little.
constexpr size_t kMinChunk = 256u << 10;
constexpr size_t kChunkAlign = 64u << 10;

bool sameKey(std::span<const uint8_t> given, const BulkLanes::Key& key) {
  if (given.size() != key.size()) return false;
  uint8_t diff = 0;  // no early exit: the time taken says nothing of where the keys differ
  for (size_t i = 0; i < key.size(); ++i) diff |= given[i] ^ key[i];
  return diff == 0;
}

bool overlaps(const std::vector<std::pair<uint64_t, uint64_t>>& claimed, uint64_t from, uint64_t to) {
  return std::any_of(claimed.begin(), claimed.end(), [&](const auto& c) { return from < c.second && c.first < to; });
}

}  // namespace

BulkLanes::BulkLanes(uint64_t tenantId, std::string tenantName, unsigned count, bool tls, std::string tlsSubject,
                     std::chrono::milliseconds wait)
    : tenantId_(tenantId),
      tenantName_(std::move(tenantName)),
      count_(std::clamp(count, 1u, kMaxLanes)),
      tls_(tls),
      tlsSubject_(std::move(tlsSubject)),
      wait_(wait),
      lanes_(count_) {
  for (size_t done = 0; done < key_.size();) {
    ssize_t n = ::getrandom(key_.data() + done, key_.size() - done, 0);
    if (n > 0) done += static_cast<size_t>(n);
  }
}

BulkLanes::~BulkLanes() { close(); }

std::string BulkLanes::join(unsigned index, std::span<const uint8_t> key, bool tls, const std::string& tlsSubject,
                            std::shared_ptr<Outbox> outbox, int fd) {
  std::lock_guard lock(mutex_);
  if (!sameKey(key, key_)) return "wrong lane key";
  if (failed_) return "the tenant's lanes are closed (" + failure_ + ")";
  if (index >= count_) return fmt::format("lane {} asked for, the tenant has {}", index, count_);
  if (tls != tls_) return tls_ ? "the tenant's connection is TLS and its lanes must be" : "the tenant's connection is plain TCP";
  if (tlsSubject != tlsSubject_) return "the client certificate is not the tenant's";
  if (lanes_[index].outbox) return fmt::format("lane {} is already joined", index);
  lanes_[index] = Lane{std::move(outbox), fd};
  ++joined_;
  return {};
}

void BulkLanes::serve(unsigned index, frame::StreamReader& reader, const frame::FrameLimits& limits) {
  frame::IncomingFrame frame;
  for (;;) {
    frame::IoStatus status = frame.readMessage(reader, limits);
    if (!status.ok) {
      std::lock_guard lock(mutex_);
      if (status.closed) {
        failLocked(fmt::format("lane {} closed", index), false);
      } else {
        failLocked(fmt::format("lane {}: {}", index, status.error));
      }
      return;
    }
    try {
      auto message = frame.message().getRoot<wire::ClientMessage>();
      if (!message.isLaneData()) {
        std::lock_guard lock(mutex_);
        failLocked(fmt::format("lane {} sent a message other than LaneData", index));
        return;
      }
      auto data = message.getLaneData();
      if (!deliver(index, data.getToken(), data.getOffset(), frame.bulkBytes(), reader)) return;
    } catch (const kj::Exception& e) {
      std::lock_guard lock(mutex_);
      failLocked(fmt::format("lane {} sent a malformed message: {}", index, e.getDescription().cStr()));
      return;
    }
  }
}

std::optional<size_t> BulkLanes::claim(unsigned index, uint64_t token, uint64_t offset, size_t size,
                                       std::unique_lock<std::mutex>& lock) {
  const auto deadline = std::chrono::steady_clock::now() + wait_;
  for (;;) {
    if (failed_) return std::nullopt;
    if (token < lastToken_ || (range_.open && token == range_.token && offset < range_.lo)) {
      failLocked(fmt::format("lane {} sent bytes at {} of copy {}, which were taken already", index, offset, token));
      return std::nullopt;
    }
    if (range_.open && token == range_.token && offset < range_.hi) {
      if (offset + size > range_.total) {
        failLocked(fmt::format("lane {} sent bytes up to {} of copy {}, which has {}", index, offset + size, token,
                               range_.total));
        return std::nullopt;
      }
      size_t n = static_cast<size_t>(std::min<uint64_t>(size, range_.hi - offset));
      if (overlaps(range_.claimed, offset, offset + n)) {
        failLocked(fmt::format("lane {} sent bytes at {} of copy {} twice", index, offset, token));
        return std::nullopt;
      }
      range_.claimed.emplace_back(offset, offset + n);
      return n;
    }
    // A later range or copy: the session asks for it once the one before is complete.
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      failLocked(fmt::format("lane {}: bytes of copy {} waited {} ms for their call", index, token, wait_.count()));
      return std::nullopt;
    }
  }
}

bool BulkLanes::deliver(unsigned index, uint64_t token, uint64_t offset, size_t size, frame::StreamReader& reader) {
  while (size > 0) {
    char* dst = nullptr;
    size_t n = 0;
    {
      std::unique_lock lock(mutex_);
      std::optional<size_t> claimed = claim(index, token, offset, size, lock);
      if (!claimed) return false;
      n = *claimed;
      if (range_.dst != nullptr) dst = range_.dst + (offset - range_.lo);
      ++range_.writers;  // the range stays while we write into it (receive waits for us)
    }
    frame::IoStatus status = dst != nullptr ? reader.read(dst, n) : reader.skip(n);
    {
      std::lock_guard lock(mutex_);
      --range_.writers;
      if (status.ok) {
        range_.filled += n;
      } else {
        failLocked(fmt::format("lane {} broke in the middle of copy {}: {}", index, token, status.error));
      }
    }
    changed_.notify_all();
    if (!status.ok) return false;
    offset += n;
    size -= n;
  }
  return true;
}

bool BulkLanes::ready() const {
  std::lock_guard lock(mutex_);
  return !failed_ && joined_ == count_;
}

bool BulkLanes::receive(uint64_t token, uint64_t total, uint64_t offset, void* dst, size_t size) {
  std::unique_lock lock(mutex_);
  if (failed_) return false;
  // A copy's ranges follow each other, and each copy has a new, larger token.
  if (token < lastToken_ || (token == lastToken_ && offset != lastEnd_) || (token > lastToken_ && offset != 0)) {
    failLocked(fmt::format("bytes at {} of copy {} asked for after copy {} up to {}", offset, token, lastToken_, lastEnd_));
    return false;
  }
  lastToken_ = token;
  lastEnd_ = offset + size;
  range_ = Range{true, token, total, offset, offset + size, static_cast<char*>(dst), 0, 0, {}};
  changed_.notify_all();
  const auto deadline = std::chrono::steady_clock::now() + wait_;
  while (!failed_ && range_.filled < size) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && range_.filled < size) {
      failLocked(fmt::format("waited {} ms for bytes {}..{} of copy {} on the lanes", wait_.count(), offset,
                             offset + size, token));
    }
  }
  // A lane that failed elsewhere may still be writing here: the buffer is the caller's after this.
  changed_.wait(lock, [&] { return range_.writers == 0; });
  range_.open = false;
  return range_.filled == size;
}

bool BulkLanes::send(uint64_t token, uint64_t offset, const char* data, size_t size,
                     const std::shared_ptr<void>& keepalive) {
  std::vector<std::shared_ptr<Outbox>> outboxes;
  unsigned first = 0;
  {
    std::lock_guard lock(mutex_);
    if (failed_ || joined_ != count_) return false;
    for (const Lane& lane : lanes_) outboxes.push_back(lane.outbox);
    first = nextLane_;
    nextLane_ = (nextLane_ + 1) % count_;
  }
  size_t chunk = (size + count_ - 1) / count_;
  chunk = std::max(kMinChunk, (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign);
  unsigned lane = first;
  for (size_t done = 0; done < size; done += chunk, lane = (lane + 1) % count_) {
    size_t n = std::min(chunk, size - done);
    capnp::MallocMessageBuilder message(64);
    auto hostData = message.initRoot<wire::ServerMessage>().initHostData();
    hostData.setToken(token);
    hostData.setOffset(offset + done);
    outboxes[lane]->send(message, {iovec{const_cast<char*>(data + done), n}}, keepalive);
  }
  return true;
}

void BulkLanes::close() {
  {
    std::lock_guard lock(mutex_);
    if (!failed_) {
      failed_ = true;
      failure_ = "the tenant's connection ended";
    }
    for (const Lane& lane : lanes_) {
      if (lane.fd >= 0) ::shutdown(lane.fd, SHUT_RDWR);
    }
  }
  changed_.notify_all();
}

std::string BulkLanes::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void BulkLanes::failLocked(std::string why, bool loud) {
  if (failed_) return;
  failed_ = true;
  failure_ = std::move(why);
  if (loud) {
    spdlog::warn("tenant {} ({}): bulk lanes failed: {}", tenantId_, tenantName_, failure_);
  } else {
    spdlog::debug("tenant {} ({}): bulk lanes closed: {}", tenantId_, tenantName_, failure_);
  }
  for (const Lane& lane : lanes_) {
    if (lane.fd >= 0) ::shutdown(lane.fd, SHUT_RDWR);
  }
  changed_.notify_all();
}

void LaneRegistry::add(const std::shared_ptr<BulkLanes>& lanes) {
  std::lock_guard lock(mutex_);
  byTenant_[lanes->tenantId()] = lanes;
}

void LaneRegistry::remove(uint64_t tenantId) {
  std::lock_guard lock(mutex_);
  byTenant_.erase(tenantId);
}

std::shared_ptr<BulkLanes> LaneRegistry::find(uint64_t tenantId) const {
  std::lock_guard lock(mutex_);
  auto it = byTenant_.find(tenantId);
  return it != byTenant_.end() ? it->second.lock() : nullptr;
}

}  // namespace tally::server::session
