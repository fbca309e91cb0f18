// The sending side of one tenant connection. Any thread may send (the session thread for
// immediate replies, the device's completion thread for deferred ones). Small frames are
// written inline when nothing is queued; bulk and anything behind a queue go through the
// outbox's writer thread, so a slow client never stalls the completion thread of a GPU.
#pragma once

#include "common/frame/shared_ring.h"

#include <capnp/message.h>
#include <kj/array.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tally::server::session {

class Outbox {
 public:
  // Takes ownership of `fd` (closed when the last holder lets go of the outbox) and of the TLS
  // records it carries (null: plain bytes), which the session's reader opens too.
  Outbox(int fd, std::unique_ptr<frame::RecordLayer> records);
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Sends `message` followed by `bulk` (kept alive by `keepalive` until written).
  void send(capnp::MessageBuilder& message, std::vector<iovec> bulk = {}, std::shared_ptr<void> keepalive = {});
  // Once what was sent so far is written, later frames go through `rings` (their toClient ring).
  void useRing(std::shared_ptr<frame::SharedRings> rings);
  // Stops the writer; later sends are dropped. A ring is closed once the queue is written.
  void close();
  // Waits until everything sent so far is written (or failed), at most `timeout`; true if it was.
  bool drain(std::chrono::milliseconds timeout);
  bool failed() const { return failed_.load(); }
  // The tenant this outbox answers (for the call trace; common/trace/call_trace.h).
  void setTenant(uint64_t id) { tenant_ = id; }
  uint64_t tenant() const { return tenant_; }
  frame::RecordLayer* records() const { return records_.get(); }

 private:
  uint64_t tenant_ = 0;
  struct Item {
    kj::Array<capnp::word> message;
    std::vector<iovec> bulk;
    std::shared_ptr<void> keepalive;
  };

  void write(Item& item);
  void run();

  int fd_;
  std::unique_ptr<frame::RecordLayer> records_;
  std::shared_ptr<frame::SharedRings> rings_;
  frame::Channel out_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable drained_;
  std::deque<Item> queue_;
  bool writerBusy_ = false;
  bool closing_ = false;
  std::atomic<bool> failed_{false};
  std::thread writer_;
};

}  // namespace tally::server::session
