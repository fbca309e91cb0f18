// A shared-memory byte stream beside a Unix socket: two single-producer/single-consumer rings in
// one sealed memfd that the client creates and tallyd maps. Frames travel through them exactly as
// through the socket (header, message, bulk), without a system call while both sides poll; the
// socket stays for descriptors (SCM_RIGHTS) and for noticing a peer that is gone.
//
// Waiting: a reader (or a writer that finds the ring full) polls for a while, then sleeps on a
// futex word in the shared page; the other side wakes it only when it said it sleeps. Sleeps last
// at most kSleepStep, after which the socket is asked whether the peer is still there.
//
// The peer can write anything into the shared page. Positions are taken modulo the capacity, so
// no value makes either side touch memory outside the rings; a peer that lies about how far it got
// only garbles its own stream, which the frame checks then refuse.
#pragma once

#include "common/frame/record_layer.h"
#include "common/frame/socket_io.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace tally::frame {

struct RingControl;

class ByteRing {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kSleepStep = std::chrono::milliseconds(10);
  using CopyFn = ForeignCopyFn;

  ByteRing(RingControl* control, char* data, size_t capacity, int socketFd)
      : control_(control), data_(data), capacity_(capacity), socketFd_(socketFd) {}

  // ---- writing (one writer at a time) ----
  // Writes every part, waiting for room as a socket send would (up to `deadline`). Parts from
  // index `firstForeign` on are copied with `foreignCopy`. Returns the bytes written; `error` is
  // 0, EFAULT (a foreign part was unreadable: bytes before it are written), EPIPE (the peer is
  // gone or closed its side) or ETIMEDOUT.
  size_t write(std::span<const iovec> parts, int& error, size_t firstForeign = SIZE_MAX,
               CopyFn foreignCopy = nullptr, std::optional<Clock::time_point> deadline = std::nullopt);
  // No more bytes from this side: the reader gets end-of-stream once it has read the rest.
  void close();

  // ---- reading (one reader at a time) ----
  size_t readable() const;  // bytes waiting, 0 when the peer's positions make no sense
  bool closedByWriter() const;
  size_t read(void* dst, size_t size);  // up to `size` waiting bytes, without waiting
  // Until bytes wait or the writer closed: polls for `spin`, then sleeps. False (errno ETIMEDOUT
  // or EPIPE) when the deadline passed or the peer is gone.
  bool waitReadable(std::chrono::microseconds spin, std::optional<Clock::time_point> deadline = std::nullopt);
  // Wakes a reader sleeping in waitReadable, which then polls for its `spin` again before it
  // sleeps. Any thread may call it. tallyd does after answering a client, whose next call tends
  // to follow the answer by microseconds: it then finds the tenant's thread polling, not asleep.
  void wakeReader();
  bool readerAsleep() const;

 private:
  size_t room() const;
  void publish(uint64_t written);
  void consumed(uint64_t read);
  bool waitForRoom(std::optional<Clock::time_point> deadline);
  bool peerGone() const;

  RingControl* control_;
  char* data_;
  size_t capacity_;  // a power of two
  int socketFd_;
  uint64_t written_ = 0;  // the writer's own count (never read back from the shared page)
  uint64_t read_ = 0;     // the reader's own count
};

// Both rings of one connection, in one mapping.
class SharedRings {
 public:
  static constexpr size_t kMinCapacity = 64u << 10, kMaxCapacity = 16u << 20, kDefaultCapacity = 1u << 20;
  // The client: a sealed memfd of two rings of `capacity` bytes (a power of two in range).
  static std::unique_ptr<SharedRings> create(size_t capacity, int socketFd, std::string& error);
  // tallyd: maps the file a client passed, after checking its seals and size. Takes `fd`.
  static std::unique_ptr<SharedRings> adopt(int fd, size_t capacity, int socketFd, std::string& error);
  ~SharedRings();
  SharedRings(const SharedRings&) = delete;
  SharedRings& operator=(const SharedRings&) = delete;

  int fd() const { return fd_; }  // the file, to pass to tallyd (the creator's)
  size_t capacity() const { return capacity_; }
  ByteRing& toServer() { return toServer_; }
  ByteRing& toClient() { return toClient_; }

  // Completion words, in the control page, each on its own cache line (schema: Call.completionSlot):
  // tallyd stores a call id's low 32 bits into the word its call names once the call's work is
  // done, before it sends the reply; the client's waiting thread returns when it sees them.
  static constexpr unsigned kCompletionSlots = 16;
  std::atomic<uint32_t>& completionWord(unsigned slot);
  // The page that holds both rings' control and the completion words (tallyd registers it
  // with the driver, so that the GPU can write a word).
  static constexpr size_t kControlPageBytes = 4096;
  char* controlPage() const { return base_; }

  static size_t fileBytes(size_t capacity);

 private:
  SharedRings(int fd, char* base, size_t capacity, int socketFd);
  int fd_;
  char* base_;
  size_t capacity_;
  ByteRing toServer_, toClient_;
};

// Where a connection's outgoing bytes go: its socket, its shared ring (which then carries
// everything but descriptors), or records (TLS) on its socket.
struct Channel {
  int fd = -1;
  ByteRing* ring = nullptr;
  RecordLayer* records = nullptr;
};

// sendCounting / writeAll / writeFrame of socket_io.h, through the ring or the records when there
// are. A
// descriptor rides on the socket with one byte, before the frame's bytes enter the ring, so it is
// there when the reader meets the frame (StreamReader::takeFd).
size_t sendCounting(const Channel& channel, std::span<const iovec> parts, int& error, size_t firstForeign = SIZE_MAX,
                    ByteRing::CopyFn foreignCopy = nullptr);
IoStatus writeAll(const Channel& channel, std::span<const iovec> parts);
// `bytes` zeros: what stands in for the rest of a frame whose bytes could not be read (EFAULT),
// so that the peer stays in step.
IoStatus writeZeros(const Channel& channel, size_t bytes);
IoStatus writeFrame(const Channel& channel, kj::ArrayPtr<const capnp::word> message, std::span<const iovec> bulk,
                    int fdToSend = -1, std::optional<ByteRing::Clock::time_point> deadline = std::nullopt);

}  // namespace tally::frame
