#include "server/session/outbox.h"

#include "common/frame/socket_io.h"

#include <capnp/serialize.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

namespace tally::server::session {

namespace {
constexpr size_t kInlineLimit = 64 << 10;
}

namespace {
// A client that stops reading must not hold a GPU's completion thread for long: writes that
// make no progress for this long fail, and the tenant is dropped.
constexpr timeval kSendTimeout{5, 0};
}  // namespace

Outbox::Outbox(int fd, std::unique_ptr<frame::RecordLayer> records)
    : fd_(fd), records_(std::move(records)), out_{fd, nullptr, records_.get()} {
  ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &kSendTimeout, sizeof(kSendTimeout));
  writer_ = std::thread([this] { run(); });
}

Outbox::~Outbox() {
  close();
  writer_.join();
  ::close(fd_);
}

void Outbox::close() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  wake_.notify_all();
}

void Outbox::write(Item& item) {
  if (failed_) return;
  // A ring has no SO_SNDTIMEO: the same limit, as a deadline.
  auto deadline = frame::ByteRing::Clock::now() + std::chrono::seconds(kSendTimeout.tv_sec);
  frame::IoStatus status = frame::writeFrame(out_, item.message, item.bulk, -1, deadline);
  // A client's next call tends to follow an answer within microseconds: have the tenant's thread
  // polling for it rather than asleep (a best-effort tenant's sync loop paid a wake-up per step).
  if (status.ok && rings_ != nullptr) rings_->toServer().wakeReader();
  if (!status.ok) {
    failed_ = true;
    spdlog::debug("outbox: {}", status.error);
    ::shutdown(fd_, SHUT_RDWR);  // wakes the session thread, which then cleans up
  }
}

void Outbox::send(capnp::MessageBuilder& message, std::vector<iovec> bulk, std::shared_ptr<void> keepalive) {
  Item item{capnp::messageToFlatArray(message), std::move(bulk), std::move(keepalive)};
  size_t bulkBytes = 0;
  for (const iovec& part : item.bulk) bulkBytes += part.iov_len;
  std::unique_lock lock(mutex_);
  if (closing_) return;
  if (queue_.empty() && !writerBusy_ && bulkBytes <= kInlineLimit) {
    write(item);  // under the lock: keeps frames in order
    return;
  }
  queue_.push_back(std::move(item));
  lock.unlock();
  wake_.notify_one();
}

void Outbox::useRing(std::shared_ptr<frame::SharedRings> rings) {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [&] { return (queue_.empty() && !writerBusy_) || failed_; });
  rings_ = std::move(rings);
  out_.ring = &rings_->toClient();
}

bool Outbox::drain(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return drained_.wait_for(lock, timeout, [&] { return (queue_.empty() && !writerBusy_) || failed_; });
}

void Outbox::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty() && closing_) {
      if (out_.ring != nullptr) out_.ring->close();  // the client reads the rest, then end-of-stream
      return;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    writerBusy_ = true;
    lock.unlock();
    write(item);
    item = Item{};
    lock.lock();
    writerBusy_ = false;
    if (queue_.empty()) drained_.notify_all();
  }
}

}  // namespace tally::server::session
