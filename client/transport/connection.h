// The client's one connection to tallyd: blocking sends from any application thread, and a
// receiver thread that routes replies to the threads waiting for them, writes device-to-host
// bytes into their destination buffers and hands host callbacks to the callback thread.
// A thread waiting for a reply reads the socket itself while it may spin (no hand-off from the
// receiver thread, no futex wake-up: a sync costs what the socket costs); whoever holds the
// reader lock reads and routes every frame, so replies of other threads are routed too.
#pragma once

#include "client/transport/bulk_lanes.h"
#include "client/transport/free_slots.h"
#include "common/address/address.h"
#include "common/frame/shared_ring.h"
#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tally::client {

// A reply as received: owns its words.
class ReplyMessage {
 public:
  ReplyMessage() = default;
  explicit ReplyMessage(kj::Array<capnp::word> words);
  // What a call that its completion word ended returns: success, nothing deferred.
  static ReplyMessage success(uint64_t id);
  wire::Reply::Reader reply();

 private:
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
};

struct HostFuncNotice {
  uint64_t stream;
  uint64_t sequence;
  uint64_t callback;
};

class Connection {
 public:
  // Connects and performs the handshake. On failure `error` says why, naming the address.
  // `refusal` (if given) gets the status tallyd asked a refused client to report (0: none).
  static std::unique_ptr<Connection> open(const address::Endpoint& endpoint, const std::string& tenantName,
                                          wire::PriorityClass priority, std::string& error, CUresult* refusal = nullptr);
  ~Connection();

  const wire::Welcome::Reader welcome();
  bool broken() const { return broken_.load(); }
  // What every call returns once the connection is broken: CUDA_ERROR_DEVICE_UNAVAILABLE, or the
  // error tallyd gave when the GPU's shared context was lost (ContextLost).
  CUresult lostStatus() const { return static_cast<CUresult>(lostStatus_.load()); }
  const std::string& endpointText() const { return endpointText_; }

  uint64_t nextCallId() { return nextCallId_.fetch_add(1); }
  // Sends a message; `bulk` follows it; `fd` rides along as SCM_RIGHTS.
  CUresult send(capnp::MessageBuilder& message, std::span<const iovec> bulk = {}, int fd = -1);
  // Sends a one-way message without bulk. The first kEagerPosts after a round trip or a pause
  // are written at once (the GPU waits for them); later ones are batched with the messages that
  // follow (launch bursts cost one write per batch, not per launch); a batch is written within
  // kBatchWindow, or sooner by the next send or round trip.
  CUresult post(capnp::MessageBuilder& message);
  // A call in flight: lets a caller keep several calls outstanding (pipelined copies).
  struct PendingCall {
    uint64_t id = 0;
    std::atomic<int> state{0};  // 0 waiting, 1 done, 2 failed, 3 done as the GPU's word said
    int32_t kind = -1;          // the call's discriminant, for the call trace
    kj::Array<capnp::word> words;
    // Set: the call named this completion word (takeCompletionSlot), and a thread polling for
    // the reply returns as soon as it holds the call id's low 32 bits; the reply that still
    // follows is then dropped.
    const std::atomic<uint32_t>* word = nullptr;
  };
  // Sends a message whose call has id `pending.id`; its reply is awaited with finishCall.
  CUresult startCall(PendingCall& pending, capnp::MessageBuilder& message, std::span<const iovec> bulk = {},
                     int fd = -1);
  CUresult finishCall(PendingCall& pending, ReplyMessage& reply);
  // Sends a message whose call has id `id` and waits for its reply (or for `word`, the
  // completion word the call names, to hold the id's low 32 bits: PendingCall::word).
  CUresult roundTrip(uint64_t id, capnp::MessageBuilder& message, ReplyMessage& reply, std::span<const iovec> bulk = {},
                     int fd = -1, const std::atomic<uint32_t>* word = nullptr);

  // Every message sent is numbered (under the send lock, so in the order tallyd reads them):
  // messagesSent() is the latest number, lastMessageOfThisThread() the number of this thread's
  // latest message. A stream drained by the reply to message N is still drained while
  // messagesSent() == N: nothing at all has been sent since (ClientRuntime::streamDrained).
  uint64_t messagesSent() const { return messages_.load(std::memory_order_acquire); }
  static uint64_t lastMessageOfThisThread();
  // What went to tallyd so far (tallyClientStats, client/api/entry_points.cc).
  uint64_t roundTrips() const { return roundTrips_.load(std::memory_order_relaxed); }
  // A completion word of the ring file (SharedRings::completionWord) for one call; an empty
  // lease without rings or when every word is in use. Its wire value is index() + 1.
  FreeSlots::Lease takeCompletionSlot() { return rings_ ? completionSlots_.take() : FreeSlots::Lease(); }
  const std::atomic<uint32_t>& completionWord(const FreeSlots::Lease& slot) { return rings_->completionWord(slot.index()); }
  // Round trips their completion word ended: it said done before their reply was read.
  uint64_t wordCompletions() const { return wordCompletions_.load(std::memory_order_relaxed); }
  uint64_t bytesSent() const { return bytesSent_.load(std::memory_order_relaxed); }

  // Device-to-host destinations: the receiver writes HostData for `token` into [dst, dst+size).
  uint64_t expectHostData(void* dst, size_t size);
  // Drops the destination (after the call that filled it returned); false when some of its
  // bytes could not be written (the application unmapped or protected the buffer).
  bool forgetHostData(uint64_t token);
  // Waits until every byte of the destination arrived (bytes on bulk lanes may come after the
  // reply that says the copy is done); false when the connection broke first.
  bool waitHostData(uint64_t token);
  // A fresh token for the bytes of a host-to-device copy on the bulk lanes.
  uint64_t newToken() { return nextToken_++; }
  // The bulk lanes tallyd granted this TCP/TLS connection (null: none; TALLY_BULK_LANES=0).
  BulkLanes* lanes() const { return lanes_.get(); }

  void setHostFuncHandler(std::function<void(const HostFuncNotice&)> handler);

  // How long a thread waiting for a reply polls for it itself before it sleeps: the default
  // (TALLY_SPIN_US, else kDefaultWaitSpin) matches the driver's default of spinning while a
  // sync waits; an application that asks for blocking syncs (cudaDeviceScheduleBlockingSync)
  // gets a short poll only.
  static constexpr std::chrono::microseconds kDefaultWaitSpin{20'000};
  static constexpr std::chrono::microseconds kBlockingWaitSpin{20};
  void setBlockingWaits(bool blocking) {
    waitSpin_.store(blocking ? kBlockingWaitSpin.count() : configuredWaitSpin_, std::memory_order_relaxed);
  }

 private:
  struct HostDestination {
    char* dst;
    size_t size;
    size_t received = 0;
    bool faulted = false;
    unsigned writers = 0;  // threads writing into dst right now (the receiver, bulk lanes)
  };

  Connection(int fd, std::string endpointText, std::unique_ptr<frame::RecordLayer> records);
  CUresult writeLocked(std::span<const iovec> parts);
  CUresult writeFrameLocked(kj::ArrayPtr<const capnp::word> words, std::span<const iovec> bulk);
  static frame::IoStatus readIntoHost(frame::StreamReader& reader, std::vector<char>& bounce, char* dst, size_t size,
                                      bool& faulted);
  // Opens the socket of a connection to `endpoint` (TLS too for tls://): its fd, or -1 and `error`.
  static int dial(const address::Endpoint& endpoint, std::unique_ptr<frame::RecordLayer>& records, std::string& error);
  void openLanes(const address::Endpoint& endpoint);
  CUresult flushLocked();
  void runFlusher();
  static std::unique_ptr<frame::RecordLayer> startTls(const address::Endpoint& endpoint, int fd, std::string& error);
  bool handshake(const std::string& tenantName, wire::PriorityClass priority, bool offerRing, std::string& error);
  // Bytes waiting to be read (buffered, in the ring or in the socket); reader lock not needed.
  bool dataWaiting() const { return reader_.readableNow(); }
  void receive();
  // Reads and routes one frame (reader lock held); false once the connection failed.
  bool readAndRoute(frame::IncomingFrame& frame);
  // Routes frames already received or waiting in the socket, without blocking for new ones
  // (reader lock held). False once the connection failed.
  bool routeWhatArrived(frame::IncomingFrame& frame);
  // Polls for the reply of `pending` on the calling thread for at most the wait spin. True when
  // it gave up without the reply: the caller then sleeps, counted in sleepers_ until it wakes.
  bool pollForReply(PendingCall& pending);
  // Writes HostData's bytes from `reader` into their destination (any thread that reads frames).
  bool routeHostData(wire::HostData::Reader data, uint32_t bulkBytes, frame::StreamReader& reader,
                     std::vector<char>& bounce);
  void fail(const std::string& why);
  void noteMessage();  // sendMutex_ held
  void contextLost(wire::ContextLost::Reader lost);

  int fd_;
  std::string endpointText_;
  std::unique_ptr<frame::RecordLayer> records_;  // tls://: the socket carries TLS records
  std::unique_ptr<frame::SharedRings> rings_;    // UDS, when tallyd accepted them
  frame::Channel out_;  // where frames go: the socket, rings_->toServer() or records_
  frame::StreamReader reader_;
  kj::Array<capnp::word> welcomeWords_;
  std::unique_ptr<capnp::FlatArrayMessageReader> welcome_;
  std::mutex sendMutex_;
  std::vector<char> batch_;                        // framed one-way messages not yet written
  std::chrono::steady_clock::time_point lastWrite_;
  unsigned eagerPosts_ = 0;                        // one-way messages still written at once (post)
  std::condition_variable batchPending_;
  bool closing_ = false;
  std::thread flusher_;
  std::atomic<uint64_t> nextCallId_{1};
  std::atomic<uint64_t> messages_{0};
  std::atomic<uint64_t> roundTrips_{0};
  std::atomic<uint64_t> wordCompletions_{0};
  FreeSlots completionSlots_{frame::SharedRings::kCompletionSlots};
  std::atomic<uint64_t> bytesSent_{0};
  uint64_t tenantId_ = 0;  // tallyd's id of this connection (Welcome), for the call trace
  CUresult refusalStatus_ = CUDA_SUCCESS;  // a refused handshake: what tallyd asked us to report
  std::atomic<bool> broken_{false};
  std::atomic<int> lostStatus_{CUDA_ERROR_DEVICE_UNAVAILABLE};
  std::mutex pendingMutex_;
  std::unordered_map<uint64_t, PendingCall*> pending_;
  std::mutex hostDataMutex_;
  std::unordered_map<uint64_t, HostDestination> hostData_;
  std::condition_variable hostDataChanged_;  // a destination got bytes, or the connection broke
  std::atomic<uint64_t> nextToken_{1};
  std::mutex readerMutex_;  // held by whichever thread reads frames (reader_, bounce_, routing)
  // Threads polling for their reply (pollForReply). Meanwhile the receiver thread does not wait
  // on the socket: a reply then wakes nobody, and tallyd's write costs no wake-up either. The
  // receiver sleeps on this word with a timeout, so a poller that got its reply leaves quietly.
  std::atomic<int> pollers_{0};
  std::atomic<int> sleepers_{0};  // callers that gave up polling and wait for the receiver thread
  int64_t configuredWaitSpin_ = kDefaultWaitSpin.count();    // µs: TALLY_SPIN_US or the default
  std::atomic<int64_t> waitSpin_{kDefaultWaitSpin.count()};  // µs: what waits use now
  std::vector<char> bounce_;  // reader lock: device-to-host bytes on their way
  std::function<void(const HostFuncNotice&)> hostFuncHandler_;
  std::thread receiver_;
  std::unique_ptr<BulkLanes> lanes_;  // last: its threads route into hostData_
};

}  // namespace tally::client
