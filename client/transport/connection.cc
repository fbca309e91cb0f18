#include "client/transport/connection.h"


#include "client/transport/host_memory.h"
#include "common/tls/tls_session.h"
#include "common/trace/call_trace.h"

#include <capnp/serialize.h>
#include <spdlog/spdlog.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tally::client {

namespace {

// Sleeps while `word` holds `expected`, at most `timeout` (a private futex: this process only).
void waitWhile(std::atomic<int>& word, int expected, std::chrono::microseconds timeout) {
  timespec ts{0, static_cast<long>(timeout.count()) * 1000};
  ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void wakeAll(std::atomic<int>& word) {
  ::syscall(SYS_futex, reinterpret_cast<int*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

frame::FrameLimits clientLimits() {
  frame::FrameLimits limits;
  limits.maxMessageBytes = 64u << 20;  // the Welcome carries every device's properties
  limits.maxBulkBytes = 256u << 20;
  return limits;
}
}  // namespace

ReplyMessage::ReplyMessage(kj::Array<capnp::word> words) : words_(std::move(words)) {
  reader_ = std::make_unique<capnp::FlatArrayMessageReader>(words_);
}

wire::Reply::Reader ReplyMessage::reply() { return reader_->getRoot<wire::ServerMessage>().getReply(); }

ReplyMessage ReplyMessage::success(uint64_t id) {
  capnp::MallocMessageBuilder message(16);
  message.initRoot<wire::ServerMessage>().initReply().setId(id);
  return ReplyMessage(capnp::messageToFlatArray(message));
}

Connection::Connection(int fd, std::string endpointText, std::unique_ptr<frame::RecordLayer> records)
    : fd_(fd),
      endpointText_(std::move(endpointText)),
      records_(std::move(records)),
      out_{fd, nullptr, records_.get()},
      reader_(fd) {
  reader_.useRecords(records_.get());
}

Connection::~Connection() {
  lanes_.reset();  // its threads route bytes here and may fail() the connection
  {
    std::lock_guard lock(sendMutex_);
    closing_ = true;
  }
  batchPending_.notify_all();
  if (flusher_.joinable()) flusher_.join();
  if (out_.ring != nullptr) out_.ring->close();
  ::shutdown(fd_, SHUT_RDWR);
  if (receiver_.joinable()) receiver_.join();
  ::close(fd_);
}

namespace {

std::string envOrEmpty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

// TALLY_BULK_LANES: how many bulk lanes a TCP/TLS client asks for (0: none; at most 8). By
// default one per 4 cores, at most 4: each lane is a thread on each side, and on a machine of
// few cores they only take turns (2 cores: 4 lanes were slower than none).
uint8_t requestedLanes() {
  const unsigned kDefaultLanes = std::min(4u, std::thread::hardware_concurrency() / 4);
  std::string text = envOrEmpty("TALLY_BULK_LANES");
  if (text.empty()) return kDefaultLanes;
  char* end = nullptr;
  unsigned long n = std::strtoul(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || n > 8) {
    spdlog::warn("tally: TALLY_BULK_LANES={} is not a number from 0 to 8; using {}", text, kDefaultLanes);
    return kDefaultLanes;
  }
  return static_cast<uint8_t>(n);
}

}  // namespace

// TLS 1.3 to a tls:// tallyd: the server's certificate must chain to TALLY_CA and name the host
// (or TALLY_TLS_NAME); TALLY_CERT/TALLY_KEY add a client certificate. Returns the records the
// socket carries from then on, or null (the socket closed).
std::unique_ptr<frame::RecordLayer> Connection::startTls(const address::Endpoint& endpoint, int fd, std::string& error) {
  std::string name = envOrEmpty("TALLY_TLS_NAME");
  tls::ClientConfig config{envOrEmpty("TALLY_CA"), envOrEmpty("TALLY_CERT"), envOrEmpty("TALLY_KEY"),
                           name.empty() ? endpoint.host : name};
  std::string why;
  std::unique_ptr<tls::Context> context = tls::Context::forClient(config, why);
  tls::Session session;
  if (context) session = tls::start(*context, fd, 10000, why);
  if (!session.records) {
    ::close(fd);
    error = "cannot reach tallyd at " + endpoint.toString() + ": " + why;
  }
  return std::move(session.records);
}

int Connection::dial(const address::Endpoint& endpoint, std::unique_ptr<frame::RecordLayer>& records,
                     std::string& error) {
  // tallyd may be starting: retry refused/absent sockets for a few seconds, then give up.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  int fd = -1;
  std::string why;
  while (fd < 0) {
    why.clear();
    fd = address::connectTo(endpoint, 2000, why);
    if (fd >= 0 || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (fd < 0) {
    error = "cannot reach tallyd at " + endpoint.toString() + ": " + why;
    return -1;
  }
  address::tuneConnectedSocket(fd);
  if (endpoint.kind == address::Endpoint::Kind::kTls) {
    records = startTls(endpoint, fd, error);
    if (!records) return -1;
  }
  return fd;
}

// Bulk lanes for a TCP/TLS connection that tallyd granted them; without them (one failed to
// open) every byte takes the connection itself, as before.
void Connection::openLanes(const address::Endpoint& endpoint) {
  auto welcome = this->welcome();
  if (welcome.getBulkLanes() == 0) return;
  std::string error;
  auto connect = [&endpoint](std::unique_ptr<frame::RecordLayer>& records, std::string& why) {
    return dial(endpoint, records, why);
  };
  auto sink = [this](wire::HostData::Reader data, uint32_t bulkBytes, frame::StreamReader& reader,
                     std::vector<char>& bounce) { return routeHostData(data, bulkBytes, reader, bounce); };
  lanes_ = BulkLanes::open(connect, tenantId_, welcome.getLaneKey(), welcome.getBulkLanes(), sink,
                           [this](const std::string& why) { fail(why); }, error);
  if (!lanes_) spdlog::warn("tally: no bulk lanes to tallyd at {} ({}); copies use the connection alone", endpointText_, error);
}

std::unique_ptr<Connection> Connection::open(const address::Endpoint& endpoint, const std::string& tenantName,
                                             wire::PriorityClass priority, std::string& error, CUresult* refusal) {
  std::unique_ptr<frame::RecordLayer> records;
  int fd = dial(endpoint, records, error);
  if (fd < 0) return nullptr;
  std::unique_ptr<Connection> c(new Connection(fd, endpoint.toString(), std::move(records)));
  // A shared ring spares a Unix-socket tenant every system call of a call's trip while both sides
  // poll (TALLY_SHARED_RING=0: the socket only).
  const char* ringEnv = std::getenv("TALLY_SHARED_RING");
  const bool offerRing = endpoint.kind == address::Endpoint::Kind::kUnix && !(ringEnv != nullptr && std::string(ringEnv) == "0");
  if (!c->handshake(tenantName, priority, offerRing, error)) {
    if (refusal != nullptr) *refusal = c->refusalStatus_;
    return nullptr;
  }
  if (const char* spin = std::getenv("TALLY_SPIN_US"); spin != nullptr && *spin != '\0') {
    c->configuredWaitSpin_ = static_cast<int64_t>(std::strtoul(spin, nullptr, 10));
    c->setBlockingWaits(false);
  }
  if (const char* path = std::getenv("TALLY_TRACE"); path != nullptr && *path != '\0') {
    if (!trace::enableCallTrace(path, "client")) spdlog::warn("tally: TALLY_TRACE: cannot open {}", path);
  }
  c->openLanes(endpoint);
  c->receiver_ = std::thread([raw = c.get()] { raw->receive(); });
  c->flusher_ = std::thread([raw = c.get()] { raw->runFlusher(); });
  return c;
}

bool Connection::handshake(const std::string& tenantName, wire::PriorityClass priority, bool offerRing,
                           std::string& error) {
  capnp::MallocMessageBuilder message;
  auto hello = message.initRoot<wire::ClientMessage>().initHello();
  hello.setProtocolVersion(wire::PROTOCOL_VERSION);
  hello.setTenantName(tenantName);
  hello.setPriority(priority);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  hello.setClientHost(host);
  hello.setClientPid(static_cast<uint32_t>(::getpid()));
  hello.setCudaRuntimeVersion(CUDA_VERSION);
  // The GPUs the application may see are chosen by tallyd (server/session/device_visibility.h).
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"); visible != nullptr) {
    std::vector<std::string> entries;
    std::string entry;
    for (const char* c = visible;; ++c) {
      if (*c == ',' || *c == '\0') {
        entries.push_back(entry);
        entry.clear();
        if (*c == '\0') break;
      } else {
        entry += *c;
      }
    }
    hello.setRestrictDevices(true);
    auto list = hello.initVisibleDevices(static_cast<unsigned>(entries.size()));
    for (unsigned i = 0; i < entries.size(); ++i) list.set(i, entries[i]);
  }
  if (const char* token = std::getenv("TALLY_TOKEN")) {
    hello.setAuthToken(kj::arrayPtr(reinterpret_cast<const kj::byte*>(token), std::strlen(token)));
  }
  if (!offerRing) hello.setBulkLanes(requestedLanes());
  if (offerRing) {
    std::string why;
    rings_ = frame::SharedRings::create(frame::SharedRings::kDefaultCapacity, fd_, why);
    if (rings_) {
      hello.setSharedRingBytes(static_cast<uint32_t>(rings_->capacity()));
    } else {
      spdlog::warn("tally: no shared ring with tallyd ({}); calls go through the socket", why);
    }
  }
  if (CUresult r = send(message, {}, rings_ ? rings_->fd() : -1); r != CUDA_SUCCESS) {
    error = "cannot send the handshake to tallyd at " + endpointText_;
    return false;
  }
  frame::IncomingFrame frame;
  frame::IoStatus status = frame.readMessage(reader_, clientLimits());
  if (!status.ok) {
    error = "tallyd at " + endpointText_ + " closed the handshake: " + status.error;
    return false;
  }
  welcomeWords_ = kj::heapArray<capnp::word>(frame.words());
  welcome_ = std::make_unique<capnp::FlatArrayMessageReader>(welcomeWords_);
  auto root = welcome_->getRoot<wire::ServerMessage>();
  if (!root.isWelcome()) {
    error = "tallyd at " + endpointText_ + " answered the handshake with something else";
    return false;
  }
  auto welcome = root.getWelcome();
  tenantId_ = welcome.getTenantId();
  if (!welcome.getAccepted()) {
    refusalStatus_ = static_cast<CUresult>(welcome.getRefusalStatus());
    error = "tallyd at " + endpointText_ + " refused the connection: " + std::string(welcome.getError().cStr());
    return false;
  }
  if (rings_ && welcome.getSharedRing()) {
    reader_.useRing(&rings_->toClient());
    out_.ring = &rings_->toServer();
  } else {
    rings_.reset();
  }
  return true;
}

const wire::Welcome::Reader Connection::welcome() { return welcome_->getRoot<wire::ServerMessage>().getWelcome(); }

namespace {
constexpr auto kBatchWindow = std::chrono::microseconds(20);
constexpr size_t kBatchBytes = 64 << 10;
// One-way messages written at once after each round trip (or pause) before batching starts:
// the GPU is idle at the start of an inference request, and a launch held back for the batch
// window is GPU time lost; a training loop's thousands of launches are still batched.
constexpr unsigned kEagerPosts = 32;
}  // namespace

CUresult Connection::writeLocked(std::span<const iovec> parts) {
  for (const iovec& part : parts) bytesSent_.fetch_add(part.iov_len, std::memory_order_relaxed);
  frame::IoStatus status = frame::writeAll(out_, parts);
  lastWrite_ = std::chrono::steady_clock::now();
  if (!status.ok) {
    fail(status.error);
    return lostStatus();
  }
  return CUDA_SUCCESS;
}

CUresult Connection::flushLocked() {
  if (batch_.empty()) return CUDA_SUCCESS;
  iovec part{batch_.data(), batch_.size()};
  CUresult r = writeLocked(std::span<const iovec>(&part, 1));
  batch_.clear();
  return r;
}

namespace {
thread_local uint64_t threadLastMessage = 0;
}  // namespace

void Connection::noteMessage() { threadLastMessage = ++messages_; }

uint64_t Connection::lastMessageOfThisThread() { return threadLastMessage; }

CUresult Connection::send(capnp::MessageBuilder& message, std::span<const iovec> bulk, int fd) {
  if (broken_) return lostStatus();
  auto words = capnp::messageToFlatArray(message);
  std::lock_guard lock(sendMutex_);
  noteMessage();
  if (CUresult r = flushLocked(); r != CUDA_SUCCESS) return r;  // keep call order
  eagerPosts_ = kEagerPosts;
  if (fd < 0) return writeFrameLocked(words, bulk);
  // A descriptor rides only with our own messages (no application bytes that could fault).
  frame::IoStatus status = frame::writeFrame(out_, words, bulk, fd);
  lastWrite_ = std::chrono::steady_clock::now();
  if (!status.ok) {
    fail(status.error);
    return lostStatus();
  }
  return CUDA_SUCCESS;
}

// The bulk bytes are the application's and may turn out unreadable mid-send (EFAULT: it
// unmapped or protected them after the checks). The header already promised them, so the rest
// of the frame is written as zeros: tallyd gets a well-formed frame, the stream stays framed,
// and the call fails with CUDA_ERROR_INVALID_VALUE instead of losing the connection.
CUresult Connection::writeFrameLocked(kj::ArrayPtr<const capnp::word> words, std::span<const iovec> bulk) {
  size_t bulkBytes = 0;
  for (const iovec& part : bulk) bulkBytes += part.iov_len;
  frame::FrameHeader header = frame::makeHeader(words.size() * sizeof(capnp::word), bulkBytes);
  std::vector<iovec> parts{{&header, sizeof(header)},
                           {const_cast<capnp::word*>(words.begin()), words.size() * sizeof(capnp::word)}};
  const size_t headBytes = parts[0].iov_len + parts[1].iov_len;
  parts.insert(parts.end(), bulk.begin(), bulk.end());
  int error = 0;
  // Parts 0 and 1 are ours; the bulk is the application's (copyIn: EFAULT, not a signal).
  size_t sentBytes = frame::sendCounting(out_, parts, error, 2, host_memory::copyIn);
  bytesSent_.fetch_add(sentBytes, std::memory_order_relaxed);
  lastWrite_ = std::chrono::steady_clock::now();
  if (error == 0) return CUDA_SUCCESS;
  if (error == EFAULT) {  // only the bulk can fault: the header and message are ours
    spdlog::error("tally: the bulk bytes of a call ({} bytes) could not be read from host memory (the application "
                  "unmapped or protected it); the call fails with CUDA_ERROR_INVALID_VALUE", bulkBytes);
    if (sentBytes == 0) return CUDA_ERROR_INVALID_VALUE;  // nothing of the frame went out
    frame::IoStatus padded = frame::writeZeros(out_, headBytes + bulkBytes - sentBytes);
    if (padded.ok) return CUDA_ERROR_INVALID_VALUE;
    fail(padded.error);
    return lostStatus();
  }
  fail(std::string("send failed: ") + std::strerror(error));
  return lostStatus();
}

CUresult Connection::post(capnp::MessageBuilder& message) {
  if (broken_) return lostStatus();
  auto words = capnp::messageToFlatArray(message);
  std::unique_lock lock(sendMutex_);
  noteMessage();
  bool idle = batch_.empty() && std::chrono::steady_clock::now() - lastWrite_ > kBatchWindow;
  if (idle) eagerPosts_ = kEagerPosts;
  bool eager = eagerPosts_ > 0;
  if (eager) --eagerPosts_;
  frame::appendFrame(batch_, words, 0);
  if (eager || batch_.size() >= kBatchBytes) return flushLocked();  // the start of a burst goes out at once
  lock.unlock();
  batchPending_.notify_one();
  return CUDA_SUCCESS;
}

void Connection::runFlusher() {
  ::prctl(PR_SET_TIMERSLACK, 1000UL);  // 20 µs sleeps, not the default 50 µs slack
  std::unique_lock lock(sendMutex_);
  for (;;) {
    batchPending_.wait(lock, [&] { return closing_ || !batch_.empty(); });
    if (closing_) return;
    auto due = lastWrite_ + kBatchWindow;
    lock.unlock();
    std::this_thread::sleep_until(due);
    lock.lock();
    if (!batch_.empty() && std::chrono::steady_clock::now() >= lastWrite_ + kBatchWindow) flushLocked();
  }
}

CUresult Connection::startCall(PendingCall& pending, capnp::MessageBuilder& message, std::span<const iovec> bulk,
                               int fd) {
  pending.state.store(0);
  roundTrips_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(pendingMutex_);
    pending_[pending.id] = &pending;
  }
  if (trace::callTraceEnabled()) {
    pending.kind = static_cast<int32_t>(message.getRoot<wire::ClientMessage>().getCalls()[0].which());
    trace::recordCall(tenantId_, pending.id, pending.kind, trace::Stage::kSend);
    trace::noteRoundTrip(tenantId_, pending.id, pending.kind);
  }
  CUresult sent = send(message, bulk, fd);
  trace::recordCall(tenantId_, pending.id, pending.kind, trace::Stage::kSent);
  if (sent != CUDA_SUCCESS) {
    std::lock_guard lock(pendingMutex_);
    pending_.erase(pending.id);
  }
  return sent;
}

bool Connection::pollForReply(PendingCall& pending) {
  auto spin = std::chrono::microseconds(waitSpin_.load(std::memory_order_relaxed));
  auto deadline = std::chrono::steady_clock::now() + spin;
  frame::IncomingFrame frame;
  bool gaveUp = false;
  pollers_.fetch_add(1);
  // A poller that has its reply leaves without waking the receiver thread, which looks again by
  // itself (receive()): a sync call then pays no system call on its way out. The last poller to
  // leave wakes it when a thread gave up polling and now depends on it for its reply.
  struct Leave {
    std::atomic<int>& pollers;
    std::atomic<int>& sleepers;
    const PendingCall& pending;
    bool& gaveUp;
    ~Leave() {
      gaveUp = pending.state.load(std::memory_order_acquire) == 0;
      if (gaveUp) sleepers.fetch_add(1);  // finishCall takes it back once the reply is there
      if (pollers.fetch_sub(1) == 1 && sleepers.load() > 0) wakeAll(pollers);
    }
  };
  {
    Leave leave{pollers_, sleepers_, pending, gaveUp};
    for (unsigned round = 0; pending.state.load(std::memory_order_acquire) == 0; ++round) {
      if (readerMutex_.try_lock()) {
        bool alive = !broken_.load() && routeWhatArrived(frame);
        readerMutex_.unlock();
        if (!alive) break;
      }
      if (pending.state.load(std::memory_order_acquire) != 0) break;
      if (pending.word != nullptr && pending.word->load(std::memory_order_acquire) == static_cast<uint32_t>(pending.id)) {
        int waiting = 0;
        pending.state.compare_exchange_strong(waiting, 3, std::memory_order_acq_rel);
        break;
      }
      if (round % 64 == 0 && std::chrono::steady_clock::now() >= deadline) break;
      __builtin_ia32_pause();
    }
  }
  return gaveUp;
}

CUresult Connection::finishCall(PendingCall& pending, ReplyMessage& reply) {
  bool gaveUp = pollForReply(pending);
  pending.state.wait(0, std::memory_order_acquire);
  if (gaveUp) sleepers_.fetch_sub(1);
  trace::recordCall(tenantId_, pending.id, pending.kind, trace::Stage::kWoken);
  {
    std::lock_guard lock(pendingMutex_);
    pending_.erase(pending.id);
  }
  // 3: its word said done (before the reply, or when the reply was read); 1: the reply decides.
  int state = pending.state.load(std::memory_order_acquire);
  if (state == 3) {
    wordCompletions_.fetch_add(1, std::memory_order_relaxed);
    reply = ReplyMessage::success(pending.id);
    return CUDA_SUCCESS;
  }
  if (state != 1) return lostStatus();
  reply = ReplyMessage(std::move(pending.words));
  return CUDA_SUCCESS;
}

CUresult Connection::roundTrip(uint64_t id, capnp::MessageBuilder& message, ReplyMessage& reply,
                               std::span<const iovec> bulk, int fd, const std::atomic<uint32_t>* word) {
  PendingCall pending;
  pending.id = id;
  pending.word = word;
  if (CUresult r = startCall(pending, message, bulk, fd); r != CUDA_SUCCESS) return r;
  return finishCall(pending, reply);
}

uint64_t Connection::expectHostData(void* dst, size_t size) {
  uint64_t token = nextToken_++;
  std::lock_guard lock(hostDataMutex_);
  hostData_[token] = HostDestination{static_cast<char*>(dst), size};
  return token;
}

bool Connection::waitHostData(uint64_t token) {
  std::unique_lock lock(hostDataMutex_);
  hostDataChanged_.wait(lock, [&] {
    auto it = hostData_.find(token);
    return it == hostData_.end() || (it->second.received >= it->second.size && it->second.writers == 0) || broken_;
  });
  auto it = hostData_.find(token);
  return it == hostData_.end() || it->second.received >= it->second.size;
}

bool Connection::forgetHostData(uint64_t token) {
  std::unique_lock lock(hostDataMutex_);
  hostDataChanged_.wait(lock, [&] {  // a lane may still write into it (a copy that failed half-way)
    auto it = hostData_.find(token);
    return it == hostData_.end() || it->second.writers == 0;
  });
  auto it = hostData_.find(token);
  if (it == hostData_.end()) return true;
  bool faulted = it->second.faulted;
  hostData_.erase(it);
  return !faulted;
}

void Connection::setHostFuncHandler(std::function<void(const HostFuncNotice&)> handler) {
  hostFuncHandler_ = std::move(handler);
}

// Bulk bytes for the application's buffer go through our own buffer and a copy that reports
// a fault instead of raising SIGSEGV (host_memory::copyOut): if the application unmapped or
// protected the destination, the bytes are dropped, the copy fails, and the stream stays in
// step. Costs one extra copy of device-to-host bulk bytes (large pageable copies over a Unix
// socket go through the staging ring instead).
frame::IoStatus Connection::readIntoHost(frame::StreamReader& reader, std::vector<char>& bounce, char* dst, size_t size,
                                         bool& faulted) {
  constexpr size_t kBounceBytes = 1u << 20;
  if (bounce.size() < std::min(size, kBounceBytes)) bounce.resize(std::min(size, kBounceBytes));
  for (size_t done = 0; done < size;) {
    size_t chunk = std::min(size - done, bounce.size());
    if (frame::IoStatus status = reader.read(bounce.data(), chunk); !status.ok) return status;
    if (!faulted && !host_memory::copyOut(dst + done, bounce.data(), chunk)) faulted = true;
    done += chunk;
  }
  return {};
}

bool Connection::routeHostData(wire::HostData::Reader data, uint32_t bulkBytes, frame::StreamReader& reader,
                               std::vector<char>& bounce) {
  char* dst = nullptr;
  {
    std::lock_guard lock(hostDataMutex_);
    auto it = hostData_.find(data.getToken());
    if (it != hostData_.end() && data.getOffset() <= it->second.size &&
        bulkBytes <= it->second.size - data.getOffset()) {
      dst = it->second.dst + data.getOffset();
      ++it->second.writers;
    }
  }
  if (dst == nullptr) {
    spdlog::error("tally: tallyd sent {} bytes for an unknown host buffer (token {})", bulkBytes, data.getToken());
    return reader.skip(bulkBytes).ok;
  }
  bool faulted = false;
  frame::IoStatus status = readIntoHost(reader, bounce, dst, bulkBytes, faulted);
  if (faulted) {
    spdlog::error("tally: host memory at {} could not be written ({} bytes of a device-to-host copy): the "
                  "application unmapped or protected it", static_cast<void*>(dst), bulkBytes);
  }
  {
    std::lock_guard lock(hostDataMutex_);
    auto it = hostData_.find(data.getToken());
    --it->second.writers;
    if (status.ok) it->second.received += bulkBytes;
    it->second.faulted = it->second.faulted || faulted;
    // Async copies have no waiter to forget them; a faulted one is kept for forgetHostData.
    if (it->second.received >= it->second.size && !it->second.faulted && it->second.writers == 0) hostData_.erase(it);
  }
  hostDataChanged_.notify_all();
  return status.ok;
}

namespace {
constexpr auto kReceiverLinger = std::chrono::microseconds(50);
// While a caller polls for its reply it routes whatever arrives (host data, host-function
// notices) itself; the receiver thread looks this often whether the pollers are gone.
constexpr auto kPollerRecheck = std::chrono::microseconds(50);

}  // namespace

void Connection::receive() {
  frame::IncomingFrame frame;
  for (;;) {
    for (int n = pollers_.load(); n != 0; n = pollers_.load()) waitWhile(pollers_, n, kPollerRecheck);
    // Linger before sleeping on the socket: back-to-back round trips then keep it unwatched.
    bool ready = false;
    auto until = std::chrono::steady_clock::now() + kReceiverLinger;
    while (!ready && pollers_.load() == 0 && std::chrono::steady_clock::now() < until) {
      ready = dataWaiting();  // whoever held the reader lock left nothing buffered
      if (!ready) __builtin_ia32_pause();
    }
    if (!ready && pollers_.load() != 0) continue;
    // Wait without the reader lock: a thread waiting for its reply may read meanwhile. A ring's
    // wait ends when the peer is gone too; reading then says so.
    if (!ready && !reader_.waitUntilReadable()) {
      return fail(reader_.usesRing() ? std::string("tallyd closed the connection")
                                     : fmt::format("poll failed: {}", std::strerror(errno)));
    }
    std::lock_guard lock(readerMutex_);
    if (broken_.load()) return;
    if (!routeWhatArrived(frame)) return;
  }
}

bool Connection::routeWhatArrived(frame::IncomingFrame& frame) {
  while (dataWaiting()) {
    if (!readAndRoute(frame)) return false;
  }
  return true;
}

bool Connection::readAndRoute(frame::IncomingFrame& frame) {
  static const frame::FrameLimits limits = clientLimits();
  frame::IoStatus status = frame.readMessage(reader_, limits);
  if (!status.ok) {
    fail(status.closed ? "tallyd closed the connection" : status.error);
    return false;
  }
  auto root = frame.message().getRoot<wire::ServerMessage>();
  switch (root.which()) {
    case wire::ServerMessage::REPLY: {
      uint64_t id = root.getReply().getId();
      if (uint64_t token = root.getReply().getDataToken(); token != 0 && frame.bulkBytes() != 0) {
        capnp::MallocMessageBuilder notice(16);
        auto data = notice.initRoot<wire::HostData>();
        data.setToken(token);
        if (!routeHostData(data.asReader(), frame.bulkBytes(), reader_, bounce_)) {
          fail("connection lost during a copy");
          return false;
        }
      }
      trace::recordCall(tenantId_, id, -1, trace::Stage::kReplied);
      std::lock_guard lock(pendingMutex_);
      auto it = pending_.find(id);
      if (it != pending_.end()) {
        PendingCall& call = *it->second;
        // Its word already says done (whoever reads first, the waiting thread or not): the reply
        // adds nothing, as tallyd stores the word only for a reply that says nothing more.
        const bool byWord = call.word != nullptr && call.word->load(std::memory_order_acquire) == static_cast<uint32_t>(id);
        if (!byWord) call.words = kj::heapArray<capnp::word>(frame.words());
        call.state.store(byWord ? 3 : 1, std::memory_order_release);
        call.state.notify_one();
      }
      break;
    }
    case wire::ServerMessage::HOST_DATA:
      if (!routeHostData(root.getHostData(), frame.bulkBytes(), reader_, bounce_)) {
        fail("connection lost during a copy");
        return false;
      }
      return true;
    case wire::ServerMessage::CONTEXT_LOST:
      contextLost(root.getContextLost());
      break;
    case wire::ServerMessage::HOST_FUNC_READY: {
      auto ready = root.getHostFuncReady();
      if (hostFuncHandler_) hostFuncHandler_({ready.getStream(), ready.getSequence(), ready.getCallback()});
      break;
    }
    default:
      break;
  }
  bool bulkConsumed = root.isReply() && root.getReply().getDataToken() != 0;
  if (!bulkConsumed && frame.bulkBytes() != 0 && !reader_.skip(frame.bulkBytes()).ok) {
    fail("connection lost");
    return false;
  }
  return true;
}

void Connection::contextLost(wire::ContextLost::Reader lost) {
  std::string names;
  for (auto name : lost.getFaultingTenants()) names += std::string(names.empty() ? "" : ", ") + name.cStr();
  if (names.empty()) names = "an unknown tenant";
  lostStatus_.store(lost.getStatus());
  spdlog::error("tally: tenant {}'s kernel faulted; the GPU's shared context was reset ({}). This application's "
                "GPU state is gone: every CUDA call now fails with CUDA error {}", names, lost.getReason().cStr(),
                lost.getStatus());
}

void Connection::fail(const std::string& why) {
  if (broken_.exchange(true)) return;
  // After a lost context (contextLost) tallyd closing the connection is expected and already told.
  if (lostStatus() == CUDA_ERROR_DEVICE_UNAVAILABLE) {
    spdlog::error("tally: lost the connection to tallyd at {}: {}; CUDA calls now fail with "
                  "cudaErrorDevicesUnavailable", endpointText_, why);
  }
  ::shutdown(fd_, SHUT_RDWR);
  {
    std::lock_guard lock(hostDataMutex_);  // waitHostData sees broken_ under this lock
  }
  hostDataChanged_.notify_all();
  {
    std::lock_guard lock(pendingMutex_);
    for (auto& [id, p] : pending_) {
      p->state.store(2, std::memory_order_release);
      p->state.notify_one();
    }
  }
}

}  // namespace tally::client
