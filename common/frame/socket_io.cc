#include "common/frame/socket_io.h"

#include "common/frame/record_layer.h"
#include "common/frame/shared_ring.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace tally::frame {

namespace {
constexpr size_t kMaxFdsPerRead = 8;
}

StreamReader::StreamReader(int fd, size_t bufferBytes) : fd_(fd), buffer_(bufferBytes) {}

StreamReader::~StreamReader() {
  for (int fd : fds_) ::close(fd);
}

int StreamReader::takeFd() {
  if (fds_.empty() && ring_ != nullptr) receiveRingDescriptors();
  if (fds_.empty()) return -1;
  int fd = fds_.front();
  fds_.pop_front();
  return fd;
}

bool StreamReader::waitReadable() {
  if (!deadline_) return true;
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now()).count();
    if (left <= 0) {
      timedOut_ = true;
      errno = ETIMEDOUT;
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    if (rc > 0 || (rc < 0 && errno != EINTR)) return true;  // recv reports what poll saw
  }
}

IoStatus StreamReader::receiveError(const char* what) const {
  if (timedOut_) return IoStatus{false, false, "timed out: the peer sent no complete frame in time", true};
  return IoStatus::failure(fmt::format("{} failed: {}", what, std::strerror(errno)));
}

ssize_t StreamReader::receive(msghdr& msg) {
  if (spinMicros_ > 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spinMicros_);
    do {
      ssize_t n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
      if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return n;
      __builtin_ia32_pause();
    } while (std::chrono::steady_clock::now() < deadline);
  }
  ssize_t n;
  do {
    if (!waitReadable()) return -1;
    n = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  return n;
}

IoStatus StreamReader::queueDescriptors(msghdr& msg) {
  size_t dropped = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fds_.size() < kMaxPendingFds) {
        fds_.push_back(fd);
      } else {
        ::close(fd);  // never kept: a peer must not make this process run out of descriptors
        ++dropped;
      }
    }
  }
  if (dropped > 0) {
    return IoStatus::failure(fmt::format("the peer passed {} more descriptor(s) than the {} its calls may leave pending",
                                         dropped, kMaxPendingFds));
  }
  // The kernel closed what did not fit the control buffer; a well-behaved peer never sends that many.
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    return IoStatus::failure(fmt::format("the peer passed more than {} descriptors with one message", kMaxFdsPerRead));
  }
  return {};
}

// With a ring, the socket carries descriptors only, one byte each; they were sent before the
// frame that takes them entered the ring, so they are here without waiting.
void StreamReader::receiveRingDescriptors() {
  char bytes[kMaxFdsPerRead];
  char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)];
  iovec iov{bytes, 1};  // one descriptor per byte: never read past the one we need
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  if (::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) > 0) (void)queueDescriptors(msg);
}

void StreamReader::useRecords(RecordLayer* records) {
  records_ = records;
  wire_.resize(records != nullptr ? buffer_.size() : 0);
}

bool StreamReader::readableNow() const {
  if (hasBuffered() || (records_ != nullptr && records_->hasPlaintext())) return true;
  if (ring_ != nullptr) return ring_->readable() > 0 || ring_->closedByWriter();
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool StreamReader::waitUntilReadable() {
  if (hasBuffered() || (records_ != nullptr && records_->hasPlaintext())) return true;
  if (ring_ != nullptr) return ring_->waitReadable(std::chrono::microseconds(0), deadline_);
  pollfd p{fd_, POLLIN, -1};
  return ::poll(&p, 1, -1) >= 0 || errno == EINTR;
}

IoStatus StreamReader::refillFromRing() {
  if (ring_->readable() == 0 && !ring_->waitReadable(std::chrono::microseconds(spinMicros_), deadline_)) {
    timedOut_ = errno == ETIMEDOUT;
    if (!timedOut_) return IoStatus{false, true, "peer closed the connection"};
    return receiveError("ring read");
  }
  size_t n = ring_->read(buffer_.data(), buffer_.size());
  if (n == 0) return IoStatus{false, true, "peer closed the connection"};  // closed, and drained
  begin_ = 0;
  end_ = n;
  return {};
}

IoStatus StreamReader::readRingDirect(char* dst, size_t size) {
  for (size_t done = 0; done < size;) {
    if (ring_->readable() == 0 && !ring_->waitReadable(std::chrono::microseconds(spinMicros_), deadline_)) {
      timedOut_ = errno == ETIMEDOUT;
      return IoStatus::failure(fmt::format("peer gone mid-frame after {} of {} bytes", done, size));
    }
    size_t n = ring_->read(dst + done, size - done);
    if (n == 0) return IoStatus::failure(fmt::format("peer closed mid-frame after {} of {} bytes", done, size));
    done += n;
  }
  return {};
}

// Opens received records into `dst` (at most `size` bytes), receiving more (waiting as for plain
// bytes) until a whole one is there. Descriptors never come this way.
IoStatus StreamReader::openRecords(char* dst, size_t size, size_t& opened) {
  std::string why;
  for (;;) {
    ssize_t n = records_->open(dst, size, why);
    if (n > 0) {
      opened = static_cast<size_t>(n);
      return {};
    }
    if (n < 0) return records_->peerClosed() ? IoStatus{false, true, "peer closed the connection"} : IoStatus::failure(why);
    iovec iov{wire_.data(), wire_.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    ssize_t got = receive(msg);
    if (got == 0) return IoStatus{false, true, "peer closed the connection"};
    if (got < 0) return receiveError("recv");
    if (!records_->absorb(wire_.data(), static_cast<size_t>(got), why)) return IoStatus::failure(why);
  }
}

IoStatus StreamReader::refillFromRecords() {
  size_t opened = 0;
  IoStatus status = openRecords(buffer_.data(), buffer_.size(), opened);
  begin_ = 0;
  end_ = opened;
  return status;
}

IoStatus StreamReader::refill() {
  if (ring_ != nullptr) return refillFromRing();
  if (records_ != nullptr) return refillFromRecords();
  char control[CMSG_SPACE(sizeof(int) * kMaxFdsPerRead)];
  iovec iov{buffer_.data(), buffer_.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = receive(msg);
  if (n == 0) return IoStatus{false, true, "peer closed the connection"};
  if (n < 0) return receiveError("recv");
  if (IoStatus status = queueDescriptors(msg); !status.ok) return status;
  begin_ = 0;
  end_ = static_cast<size_t>(n);
  return {};
}

IoStatus StreamReader::read(void* dst, size_t size) {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < size) {
    if (begin_ == end_) {
      // Large remainders bypass the buffer (descriptors only accompany small frames).
      if (size - done >= buffer_.size() && ring_ != nullptr) return readRingDirect(out + done, size - done);
      if (size - done >= buffer_.size() && records_ != nullptr) {
        size_t opened = 0;
        IoStatus status = openRecords(out + done, size - done, opened);
        if (!status.ok) return IoStatus::failure(fmt::format("peer gone mid-frame after {} of {} bytes: {}", done, size, status.error));
        done += opened;
        continue;
      }
      if (size - done >= buffer_.size()) {
        ssize_t n = waitReadable() ? ::recv(fd_, out + done, size - done, 0) : -1;
        if (n > 0) {
          done += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return IoStatus::failure(fmt::format("peer closed mid-frame after {} of {} bytes", done, size));
        return receiveError("recv");
      }
      IoStatus status = refill();
      if (!status.ok) {
        if (status.closed && done > 0) return IoStatus::failure(fmt::format("peer closed mid-frame after {} of {} bytes", done, size));
        return status;
      }
    }
    size_t chunk = std::min(size - done, end_ - begin_);
    std::memcpy(out + done, buffer_.data() + begin_, chunk);
    begin_ += chunk;
    done += chunk;
  }
  return {};
}

IoStatus StreamReader::skip(size_t size) {
  char sink[16384];
  while (size > 0) {
    size_t chunk = std::min(size, sizeof(sink));
    if (IoStatus status = read(sink, chunk); !status.ok) return status;
    size -= chunk;
  }
  return {};
}

size_t sendCounting(int fd, std::span<const iovec> parts, int& error) {
  std::vector<iovec> pending(parts.begin(), parts.end());
  size_t index = 0, sent = 0;
  error = 0;
  while (index < pending.size()) {
    msghdr msg{};
    msg.msg_iov = pending.data() + index;
    msg.msg_iovlen = std::min<size_t>(pending.size() - index, IOV_MAX);
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      return sent;
    }
    auto left = static_cast<size_t>(n);
    sent += left;
    while (index < pending.size() && left >= pending[index].iov_len) {
      left -= pending[index].iov_len;
      ++index;
    }
    if (left > 0) {
      pending[index].iov_base = static_cast<char*>(pending[index].iov_base) + left;
      pending[index].iov_len -= left;
    }
  }
  return sent;
}

IoStatus writeAll(int fd, std::span<const iovec> parts) {
  int error = 0;
  sendCounting(fd, parts, error);
  if (error != 0) return IoStatus::failure(fmt::format("send failed: {}", std::strerror(error)));
  return {};
}

IoStatus IncomingFrame::readMessage(StreamReader& reader, const FrameLimits& limits) {
  reader_.reset();
  IoStatus status = reader.read(&header_, sizeof(header_));
  if (!status.ok) return status;
  if (std::string why = checkHeader(header_, limits); !why.empty()) return IoStatus::failure(why);
  size_t words = header_.messageBytes / sizeof(capnp::word);
  if (words_.size() < words) words_ = kj::heapArray<capnp::word>(std::max<size_t>(words, 512));
  status = reader.read(words_.begin(), header_.messageBytes);
  if (!status.ok) return status;
  try {
    reader_.emplace(words_.slice(0, words), readerOptions(limits));
  } catch (const kj::Exception& e) {
    return IoStatus::failure(fmt::format("malformed message: {}", e.getDescription().cStr()));
  }
  return {};
}

void appendFrame(std::vector<char>& out, kj::ArrayPtr<const capnp::word> message, size_t bulkBytes) {
  FrameHeader header = makeHeader(message.size() * sizeof(capnp::word), bulkBytes);
  const char* h = reinterpret_cast<const char*>(&header);
  out.insert(out.end(), h, h + sizeof(header));
  const char* m = reinterpret_cast<const char*>(message.begin());
  out.insert(out.end(), m, m + message.size() * sizeof(capnp::word));
}

ssize_t sendWithDescriptor(int socketFd, const void* bytes, size_t size, int fd) {
  char control[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<void*>(bytes), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  ssize_t n;
  do {
    n = ::sendmsg(socketFd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

std::vector<iovec> frameParts(const FrameHeader& header, kj::ArrayPtr<const capnp::word> message,
                              std::span<const iovec> bulk) {
  std::vector<iovec> parts;
  parts.reserve(2 + bulk.size());
  parts.push_back({const_cast<FrameHeader*>(&header), sizeof(header)});
  parts.push_back({const_cast<capnp::word*>(message.begin()), message.size() * sizeof(capnp::word)});
  parts.insert(parts.end(), bulk.begin(), bulk.end());
  return parts;
}

size_t bulkBytesOf(std::span<const iovec> bulk) {
  size_t bytes = 0;
  for (const iovec& part : bulk) bytes += part.iov_len;
  return bytes;
}

IoStatus writeFrame(int fd, kj::ArrayPtr<const capnp::word> message, std::span<const iovec> bulk,
                    int fdToSend) {
  FrameHeader header = makeHeader(message.size() * sizeof(capnp::word), bulkBytesOf(bulk));
  std::vector<iovec> parts = frameParts(header, message, bulk);
  if (fdToSend < 0) return writeAll(fd, parts);
  // The descriptor rides on the header, sent alone; the rest follows.
  ssize_t n = sendWithDescriptor(fd, &header, sizeof(header), fdToSend);
  if (n < 0) return IoStatus::failure(fmt::format("sendmsg with descriptor failed: {}", std::strerror(errno)));
  parts[0].iov_base = reinterpret_cast<char*>(&header) + n;
  parts[0].iov_len = sizeof(header) - static_cast<size_t>(n);
  return writeAll(fd, parts);
}

}  // namespace tally::frame
