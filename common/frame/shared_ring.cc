#include "common/frame/shared_ring.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tally::frame {

// One direction's control words, each on its own cache line: the writer's and the reader's
// positions must not share one.
struct RingControl {
  alignas(64) std::atomic<uint64_t> written;  // bytes ever written (the writer stores)
  alignas(64) std::atomic<uint64_t> read;     // bytes ever read (the reader stores)
  alignas(64) std::atomic<uint32_t> dataSignal;     // futex: bumped for a sleeping reader
  std::atomic<uint32_t> readerSleeps;
  alignas(64) std::atomic<uint32_t> roomSignal;     // futex: bumped for a sleeping writer
  std::atomic<uint32_t> writerSleeps;
  alignas(64) std::atomic<uint32_t> closed;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

namespace {

constexpr size_t kControlBytes = SharedRings::kControlPageBytes;  // both RingControls, then the rings
constexpr uint32_t kMagic = 0x52594c54;  // "TLYR"
constexpr size_t kToClientControlOffset = 1024;
constexpr size_t kMagicOffset = 3072;
constexpr size_t kCompletionWordsOffset = 2048;
static_assert(sizeof(RingControl) <= kToClientControlOffset);
static_assert(kToClientControlOffset + sizeof(RingControl) <= kCompletionWordsOffset &&
              kCompletionWordsOffset + SharedRings::kCompletionSlots * 64 <= kMagicOffset);

// Shared (not process-private) futexes: the other side is another process.
void futexWait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1'000'000'000), static_cast<long>(timeout.count() % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWake(std::atomic<uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

// How long the next sleep may last: a step, or what is left before the deadline.
std::chrono::nanoseconds sleepFor(std::optional<ByteRing::Clock::time_point> deadline) {
  std::chrono::nanoseconds step = ByteRing::kSleepStep;
  if (deadline) step = std::min(step, std::chrono::nanoseconds(*deadline - ByteRing::Clock::now()));
  return std::max(step, std::chrono::nanoseconds(1000));
}

bool past(std::optional<ByteRing::Clock::time_point> deadline) {
  return deadline && ByteRing::Clock::now() >= *deadline;
}

}  // namespace

// ---- ByteRing ----------------------------------------------------------------------------------

bool ByteRing::peerGone() const {
  if (socketFd_ < 0) return false;
  pollfd p{socketFd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

size_t ByteRing::room() const {
  uint64_t read = control_->read.load(std::memory_order_seq_cst);
  uint64_t used = written_ - read;
  return used > capacity_ ? 0 : capacity_ - used;  // a position from the future: no room at all
}

void ByteRing::publish(uint64_t written) {
  control_->written.store(written, std::memory_order_seq_cst);
  wakeReader();  // paired with the reader's "I sleep, then look again": one of us sees the other
}

void ByteRing::wakeReader() {
  if (control_->readerSleeps.load(std::memory_order_seq_cst) != 0) {
    control_->dataSignal.fetch_add(1, std::memory_order_seq_cst);
    futexWake(control_->dataSignal);
  }
}

bool ByteRing::readerAsleep() const { return control_->readerSleeps.load(std::memory_order_seq_cst) != 0; }

void ByteRing::consumed(uint64_t read) {
  control_->read.store(read, std::memory_order_seq_cst);
  if (control_->writerSleeps.load(std::memory_order_seq_cst) != 0) {
    control_->roomSignal.fetch_add(1, std::memory_order_seq_cst);
    futexWake(control_->roomSignal);
  }
}

bool ByteRing::waitForRoom(std::optional<Clock::time_point> deadline) {
  // The reader drains in microseconds while it polls: poll briefly before sleeping.
  auto spinUntil = Clock::now() + std::chrono::microseconds(50);
  while (room() == 0 && Clock::now() < spinUntil) __builtin_ia32_pause();
  while (room() == 0) {
    if (control_->closed.load(std::memory_order_acquire) != 0 || peerGone()) {
      errno = EPIPE;
      return false;
    }
    if (past(deadline)) {
      errno = ETIMEDOUT;
      return false;
    }
    control_->writerSleeps.store(1, std::memory_order_seq_cst);
    uint32_t signal = control_->roomSignal.load(std::memory_order_seq_cst);
    if (room() == 0) futexWait(control_->roomSignal, signal, sleepFor(deadline));
    control_->writerSleeps.store(0, std::memory_order_seq_cst);
  }
  return true;
}

size_t ByteRing::write(std::span<const iovec> parts, int& error, size_t firstForeign, CopyFn foreignCopy,
                       std::optional<Clock::time_point> deadline) {
  error = 0;
  size_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const char* src = static_cast<const char*>(parts[i].iov_base);
    size_t left = parts[i].iov_len;
    const bool foreign = i >= firstForeign && foreignCopy != nullptr;
    while (left > 0) {
      if (room() == 0) {
        publish(written_);
        if (!waitForRoom(deadline)) {
          error = errno;
          return total;
        }
      }
      size_t at = written_ & (capacity_ - 1);
      size_t chunk = std::min({left, room(), capacity_ - at});
      if (foreign ? !foreignCopy(data_ + at, src, chunk) : (std::memcpy(data_ + at, src, chunk), false)) {
        publish(written_);
        error = EFAULT;
        return total;
      }
      written_ += chunk;
      total += chunk;
      src += chunk;
      left -= chunk;
    }
  }
  publish(written_);
  return total;
}

void ByteRing::close() {
  control_->closed.store(1, std::memory_order_seq_cst);
  publish(written_);
  control_->dataSignal.fetch_add(1, std::memory_order_seq_cst);
  futexWake(control_->dataSignal);
}

size_t ByteRing::readable() const {
  uint64_t written = control_->written.load(std::memory_order_seq_cst);
  uint64_t waiting = written - read_;
  return waiting > capacity_ ? 0 : static_cast<size_t>(waiting);
}

bool ByteRing::closedByWriter() const { return control_->closed.load(std::memory_order_acquire) != 0; }

size_t ByteRing::read(void* dst, size_t size) {
  size_t n = std::min(size, readable());
  size_t at = read_ & (capacity_ - 1);
  size_t first = std::min(n, capacity_ - at);
  std::memcpy(dst, data_ + at, first);
  std::memcpy(static_cast<char*>(dst) + first, data_, n - first);
  read_ += n;
  if (n > 0) consumed(read_);
  return n;
}

bool ByteRing::waitReadable(std::chrono::microseconds spin, std::optional<Clock::time_point> deadline) {
  auto ready = [&] { return readable() > 0 || closedByWriter(); };
  for (;;) {
    auto spinUntil = Clock::now() + spin;
    for (unsigned round = 0;; ++round) {
      if (ready()) return true;
      if (round % 64 == 0 && Clock::now() >= spinUntil) break;
      __builtin_ia32_pause();
    }
    // Sleep until bytes come, the sleep step ends (to look at the peer and the deadline), or
    // wakeReader: then poll for `spin` again, as the bytes it announces are near.
    for (bool woken = false; !woken;) {
      control_->readerSleeps.store(1, std::memory_order_seq_cst);
      uint32_t signal = control_->dataSignal.load(std::memory_order_seq_cst);
      if (!ready()) futexWait(control_->dataSignal, signal, sleepFor(deadline));
      control_->readerSleeps.store(0, std::memory_order_seq_cst);
      if (ready()) return true;
      if (peerGone()) {
        errno = EPIPE;
        return false;
      }
      if (past(deadline)) {
        errno = ETIMEDOUT;
        return false;
      }
      woken = control_->dataSignal.load(std::memory_order_seq_cst) != signal;
    }
  }
}

// ---- SharedRings -------------------------------------------------------------------------------

size_t SharedRings::fileBytes(size_t capacity) { return kControlBytes + 2 * capacity; }

namespace {
bool validCapacity(size_t capacity) {
  return capacity >= SharedRings::kMinCapacity && capacity <= SharedRings::kMaxCapacity &&
         (capacity & (capacity - 1)) == 0;
}
}  // namespace

SharedRings::SharedRings(int fd, char* base, size_t capacity, int socketFd)
    : fd_(fd),
      base_(base),
      capacity_(capacity),
      toServer_(reinterpret_cast<RingControl*>(base), base + kControlBytes, capacity, socketFd),
      toClient_(reinterpret_cast<RingControl*>(base + kToClientControlOffset), base + kControlBytes + capacity, capacity,
                socketFd) {}

std::atomic<uint32_t>& SharedRings::completionWord(unsigned slot) {
  return *reinterpret_cast<std::atomic<uint32_t>*>(base_ + kCompletionWordsOffset + (slot % kCompletionSlots) * 64);
}

SharedRings::~SharedRings() {
  ::munmap(base_, fileBytes(capacity_));
  if (fd_ >= 0) ::close(fd_);
}

std::unique_ptr<SharedRings> SharedRings::create(size_t capacity, int socketFd, std::string& error) {
  if (!validCapacity(capacity)) {
    error = fmt::format("ring capacity {} is not a power of two between {} and {}", capacity, kMinCapacity, kMaxCapacity);
    return nullptr;
  }
  int fd = ::memfd_create("tally-rings", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    error = fmt::format("memfd_create failed: {}", std::strerror(errno));
    return nullptr;
  }
  const size_t bytes = fileBytes(capacity);
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      (base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    error = fmt::format("setting up the ring file failed: {}", std::strerror(errno));
    ::close(fd);
    return nullptr;
  }
  std::memcpy(static_cast<char*>(base) + kMagicOffset, &kMagic, sizeof(kMagic));
  return std::unique_ptr<SharedRings>(new SharedRings(fd, static_cast<char*>(base), capacity, socketFd));
}

std::unique_ptr<SharedRings> SharedRings::adopt(int fd, size_t capacity, int socketFd, std::string& error) {
  auto refuse = [&](std::string why) -> std::unique_ptr<SharedRings> {
    error = std::move(why);
    ::close(fd);
    return nullptr;
  };
  if (fd < 0) return refuse("no ring file came with the Hello");
  if (!validCapacity(capacity)) return refuse(fmt::format("ring capacity {} is out of range", capacity));
  // Sealed against shrinking: a client that shrank it would make tallyd take SIGBUS.
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return refuse("the ring file is not sealed against shrinking");
  struct stat st {};
  const size_t bytes = fileBytes(capacity);
  if (::fstat(fd, &st) != 0 || st.st_size < 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    return refuse(fmt::format("the ring file holds fewer than {} bytes", bytes));
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return refuse(fmt::format("mapping the ring file failed: {}", std::strerror(errno)));
  uint32_t magic = 0;
  std::memcpy(&magic, static_cast<char*>(base) + kMagicOffset, sizeof(magic));
  if (magic != kMagic) {
    ::munmap(base, bytes);
    return refuse("the ring file does not start as a client's ring file");
  }
  return std::unique_ptr<SharedRings>(new SharedRings(fd, static_cast<char*>(base), capacity, socketFd));
}

// ---- channels ----------------------------------------------------------------------------------

size_t sendCounting(const Channel& channel, std::span<const iovec> parts, int& error, size_t firstForeign,
                    ByteRing::CopyFn foreignCopy) {
  if (channel.records != nullptr) return sendSealed(channel.fd, *channel.records, parts, error, firstForeign, foreignCopy);
  if (channel.ring == nullptr) return sendCounting(channel.fd, parts, error);
  return channel.ring->write(parts, error, firstForeign, foreignCopy);
}

namespace {
IoStatus writeStatus(const Channel& channel, int error) {
  if (error == 0) return {};
  const char* what = channel.records != nullptr ? "sealed send" : channel.ring != nullptr ? "ring write" : "send";
  return IoStatus::failure(fmt::format("{} failed: {}", what, std::strerror(error)));
}
}  // namespace

IoStatus writeAll(const Channel& channel, std::span<const iovec> parts) {
  if (channel.ring == nullptr && channel.records == nullptr) return writeAll(channel.fd, parts);
  int error = 0;
  sendCounting(channel, parts, error);
  return writeStatus(channel, error);
}

IoStatus writeZeros(const Channel& channel, size_t bytes) {
  static const std::vector<char> zeros(64u << 10, 0);
  std::vector<iovec> parts;
  for (size_t left = bytes; left > 0; left -= std::min(left, zeros.size())) {
    parts.push_back({const_cast<char*>(zeros.data()), std::min(left, zeros.size())});
  }
  return writeAll(channel, parts);
}

IoStatus writeFrame(const Channel& channel, kj::ArrayPtr<const capnp::word> message, std::span<const iovec> bulk,
                    int fdToSend, std::optional<ByteRing::Clock::time_point> deadline) {
  if (channel.records != nullptr && fdToSend >= 0) return IoStatus::failure("a descriptor cannot travel in a TLS record");
  if (channel.ring == nullptr && channel.records == nullptr) return writeFrame(channel.fd, message, bulk, fdToSend);
  // One byte carries the descriptor, before the frame that takes it enters the ring.
  const char byte = 'F';
  if (fdToSend >= 0 && sendWithDescriptor(channel.fd, &byte, 1, fdToSend) != 1) {
    return IoStatus::failure(fmt::format("sendmsg with descriptor failed: {}", std::strerror(errno)));
  }
  FrameHeader header = makeHeader(message.size() * sizeof(capnp::word), bulkBytesOf(bulk));
  std::vector<iovec> parts = frameParts(header, message, bulk);
  int error = 0;
  if (channel.records != nullptr) {
    sendSealed(channel.fd, *channel.records, parts, error);
  } else {
    channel.ring->write(parts, error, SIZE_MAX, nullptr, deadline);
  }
  return writeStatus(channel, error);
}

}  // namespace tally::frame
