// Blocking framed I/O on a connected socket, shared by the client and tallyd's tenant threads.
#pragma once

#include "common/frame/frame.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tally::frame {

class ByteRing;
class RecordLayer;

// Result of an I/O helper: ok, or the reason (errno text, "peer closed", limit violation).
struct IoStatus {
  bool ok = true;
  bool closed = false;   // orderly EOF before any byte of a frame
  std::string error;
  bool timedOut = false;  // the reader's deadline passed first (StreamReader::setDeadline)
  static IoStatus failure(std::string why) { return IoStatus{false, false, std::move(why)}; }
};

// Buffered reads from a stream socket: many small frames cost one recvmsg, large bulk goes
// straight to its destination. Descriptors passed with SCM_RIGHTS are queued in arrival order,
// at most kMaxPendingFds of them: a peer that sends more than its calls take is refused.
class StreamReader {
 public:
  static constexpr size_t kMaxPendingFds = 16;
  using Clock = std::chrono::steady_clock;

  explicit StreamReader(int fd, size_t bufferBytes = 256 << 10);
  ~StreamReader();

  // Before blocking for more bytes, poll the socket for this long: a peer that answers
  // within it costs no scheduler wake-up (the round-trip latency of a sync call).
  void setSpinMicros(unsigned micros) { spinMicros_ = micros; }
  // Reads fail ("timed out") once `deadline` has passed without the bytes they wait for, however
  // slowly the peer trickles them in; nullopt: no deadline (the default).
  void setDeadline(std::optional<Clock::time_point> deadline) {
    deadline_ = deadline;
    timedOut_ = false;
  }

  // From now on bytes come from `ring` (shared_ring.h); the socket carries only descriptors,
  // one byte each. Nothing may be buffered from the socket when this is called.
  void useRing(ByteRing* ring) { ring_ = ring; }
  bool usesRing() const { return ring_ != nullptr; }
  // From now on the socket carries records (TLS) that `records` opens. Nothing may be buffered.
  void useRecords(RecordLayer* records);

  IoStatus read(void* dst, size_t size);
  IoStatus skip(size_t size);
  // The oldest received descriptor, or -1. The caller owns it.
  int takeFd();
  int fd() const { return fd_; }
  // Bytes received but not yet read: a frame may be waiting that no poll of the socket shows.
  bool hasBuffered() const { return end_ > begin_; }
  // Bytes that a read would get without waiting: buffered, in the ring, or (no ring) in the socket.
  bool readableNow() const;
  // Blocks until readableNow(), the peer is gone, or the deadline passed (false).
  bool waitUntilReadable();

 private:
  IoStatus refill();
  ssize_t receive(msghdr& msg);
  // Blocks until the socket is readable; false (errno ETIMEDOUT) once the deadline has passed.
  bool waitReadable();
  IoStatus receiveError(const char* what) const;
  // Queues the SCM_RIGHTS descriptors of `msg`; an error once the queue would exceed its cap
  // (the extra descriptors are closed).
  IoStatus queueDescriptors(msghdr& msg);
  IoStatus refillFromRing();
  IoStatus refillFromRecords();
  IoStatus openRecords(char* dst, size_t size, size_t& opened);
  IoStatus readRingDirect(char* dst, size_t size);
  void receiveRingDescriptors();
  unsigned spinMicros_ = 0;
  ByteRing* ring_ = nullptr;
  RecordLayer* records_ = nullptr;
  std::vector<char> wire_;  // records as received, before they are opened
  std::optional<Clock::time_point> deadline_;
  bool timedOut_ = false;  // the last failed receive ran into the deadline

  int fd_;
  std::vector<char> buffer_;
  size_t begin_ = 0;
  size_t end_ = 0;
  std::deque<int> fds_;
};

IoStatus writeAll(int fd, std::span<const iovec> parts);
// writeAll, saying how far it got and why it stopped: `error` is the errno of the send that
// stopped it (0: every byte went out). A caller whose bytes are another's (an application's
// buffer) can tell EFAULT apart from a peer that is gone.
size_t sendCounting(int fd, std::span<const iovec> parts, int& error);

// One received frame: the message stays readable until the next readMessage on this object;
// its bulk bytes are still in the reader and must be consumed (read or skip) before the next.
class IncomingFrame {
 public:
  IoStatus readMessage(StreamReader& reader, const FrameLimits& limits);
  capnp::FlatArrayMessageReader& message() { return *reader_; }
  uint32_t bulkBytes() const { return header_.bulkBytes; }
  // The raw message words (segment table included), e.g. to keep a copy.
  kj::ArrayPtr<const capnp::word> words() const { return words_.slice(0, header_.messageBytes / sizeof(capnp::word)); }

 private:
  FrameHeader header_{};
  kj::Array<capnp::word> words_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
};

// Appends header + message to `out` (for coalesced writes of small frames).
void appendFrame(std::vector<char>& out, kj::ArrayPtr<const capnp::word> message, size_t bulkBytes);

// Sends `size` bytes with `fd` as SCM_RIGHTS in one sendmsg: the bytes sent, or -1 (errno).
ssize_t sendWithDescriptor(int socketFd, const void* bytes, size_t size, int fd);
// The parts of one frame: `header` (which must outlive them), the message, the bulk.
std::vector<iovec> frameParts(const FrameHeader& header, kj::ArrayPtr<const capnp::word> message,
                              std::span<const iovec> bulk);
size_t bulkBytesOf(std::span<const iovec> bulk);

// Writes header + message + bulk with one sendmsg; `fdToSend` (>= 0) rides along as
// SCM_RIGHTS on Unix sockets.
IoStatus writeFrame(int fd, kj::ArrayPtr<const capnp::word> message, std::span<const iovec> bulk,
                    int fdToSend = -1);

}  // namespace tally::frame
