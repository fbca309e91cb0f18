#include "server/session/session.h"

#include "common/trace/call_trace.h"
#include "server/session/device_visibility.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace tally::server::session {

Session::Session(int fd, std::unique_ptr<frame::RecordLayer> records, PeerInfo peer, SessionServices& services,
                 uint64_t tenantId, const std::atomic<bool>& draining)
    : fd_(fd), peer_(std::move(peer)), services_(services), tenantId_(tenantId), draining_(draining) {
  outbox_ = std::make_shared<Outbox>(fd_, std::move(records));
  outbox_->setTenant(tenantId);
}

Session::~Session() {
  // The last reference may be the session thread's own: it cannot join itself.
  if (thread_.joinable() && thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();
  } else {
    join();
  }
  // The socket is closed by the Outbox, which completion callbacks may still hold: closing it
  // here could let the number be reused by another tenant's connection while they write.
}

void Session::start(std::function<void(Session&)> onExit) {
  onExit_ = std::move(onExit);
  thread_ = std::thread([self = shared_from_this()] { self->run(); });
}

void Session::stop() { ::shutdown(fd_, SHUT_RDWR); }

void Session::join() {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void buildRefusal(capnp::MessageBuilder& message, const std::string& why, CUresult status) {
  auto welcome = message.initRoot<wire::ServerMessage>().initWelcome();
  welcome.setAccepted(false);
  welcome.setError(why);
  welcome.setRefusalStatus(status);
  welcome.setProtocolVersion(wire::PROTOCOL_VERSION);
}

void Session::refuse(const std::string& why, const std::string& detail, CUresult status) {
  spdlog::warn("refused {}: {}{}", peer_.description, why, detail);
  capnp::MallocMessageBuilder message;
  buildRefusal(message, why, status);
  outbox_->send(message);
}

namespace {

void describeDevices(wire::Welcome::Builder welcome, const std::vector<gpu::Gpu*>& gpus) {
  auto devices = welcome.initDevices(static_cast<unsigned>(gpus.size()));
  for (unsigned i = 0; i < gpus.size(); ++i) {
    const gpu::DeviceDescription& d = gpus[i]->description();
    auto out = devices[i];
    out.setOrdinal(i);
    out.setName(d.name);
    out.setMajor(d.major);
    out.setMinor(d.minor);
    out.setTotalMem(d.totalMem);
    out.setProperties(kj::arrayPtr(reinterpret_cast<const kj::byte*>(d.properties.data()), d.properties.size()));
    auto attributes = out.initAttributes(static_cast<unsigned>(d.attributes.size()));
    for (unsigned a = 0; a < d.attributes.size(); ++a) attributes.set(a, d.attributes[a]);
    out.setStreamPriorityLeast(d.streamPriorityLeast);
    out.setStreamPriorityGreatest(d.streamPriorityGreatest);
    out.setUuid(kj::arrayPtr(reinterpret_cast<const kj::byte*>(d.uuid.data()), d.uuid.size()));
    auto peers = out.initP2pAttributes(static_cast<unsigned>(gpus.size()));
    for (unsigned j = 0; j < gpus.size(); ++j) {
      std::vector<int> values = gpus[i]->peerAttributes(*gpus[j]);
      auto row = peers.init(j, static_cast<unsigned>(values.size()));
      for (unsigned a = 0; a < values.size(); ++a) row.set(a, values[a]);
    }
  }
}

}  // namespace

namespace {

// Lowers the calling thread's CPU priority by `increment` nice steps (Linux: per thread). A
// best-effort tenant's thread polls for its syncs as natively a spinning sync would; on a host
// short of cores it must not take a core from a high-priority tenant's thread.
void runNicer(unsigned increment) {
  if (increment == 0) return;
  auto thread = static_cast<id_t>(::gettid());
  errno = 0;
  int now = ::getpriority(PRIO_PROCESS, thread);
  if (errno != 0 || ::setpriority(PRIO_PROCESS, thread, std::min(19, now + static_cast<int>(increment))) != 0) {
    spdlog::warn("session: could not lower a best-effort tenant's thread priority: {}", std::strerror(errno));
  }
}

// SO_PEERCRED uid of a Unix-socket peer; nullopt for TCP and TLS (a TLS peer's fd is a local
// socketpair whose credentials are tallyd's own), or when the kernel says nothing.
std::optional<uint32_t> unixPeerUid(int fd, const PeerInfo& peer) {
  if (!peer.unixSocket) return std::nullopt;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.ss_family != AF_UNIX) return std::nullopt;
  ucred cred{};
  socklen_t credLen = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &credLen) != 0) return std::nullopt;
  return cred.uid;
}

PriorityClass requestedPriority(wire::Hello::Reader hello) {
  return hello.getPriority() == wire::PriorityClass::HIGH_PRIORITY ? PriorityClass::kHigh : PriorityClass::kBestEffort;
}

const char* priorityText(PriorityClass p) { return p == PriorityClass::kHigh ? "high priority" : "best effort"; }

}  // namespace

std::optional<Session::Admission> Session::admit(wire::Hello::Reader hello) {
  std::string claimed = hello.getTenantName();
  if (claimed.empty()) claimed = fmt::format("pid{}", hello.getClientPid());
  auto token = hello.getAuthToken();
  AuthResult auth = authenticate(services_.auth, std::span<const uint8_t>(token.begin(), token.size()),
                                 unixPeerUid(fd_, peer_), peer_.tlsSubject);
  if (!auth.error.empty()) {
    refuse(auth.error, fmt::format(" (client names itself '{}')", claimed));
    return std::nullopt;
  }
  TenantRule anonymous;
  anonymous.name = claimed;
  const TenantRule& rule = auth.rule != nullptr ? *auth.rule : anonymous;
  PriorityDecision priority = auth.rule != nullptr
                                  ? decidePriority(rule, requestedPriority(hello))
                                  : decideAnonymousPriority(services_.auth, peer_.unixSocket, requestedPriority(hello));
  if (!priority.error.empty()) {
    refuse(priority.error);
    return std::nullopt;
  }
  if (priority.capped) {
    spdlog::info("tenant {} from {} asked for high priority; capped to best effort (cap_priority)", rule.name,
                 peer_.description);
  }
  if (auth.rule != nullptr) {
    spdlog::info("{} authenticated as tenant {} (client names itself '{}')", peer_.description, rule.name, claimed);
  }
  return Admission{rule.name, priority.granted, rule.limits};
}

bool Session::handshake(frame::StreamReader& reader) {
  frame::IncomingFrame frame;
  // Until it is admitted a peer is anonymous: it gets handshake_timeout_ms for its whole Hello,
  // however slowly it sends it, and no more.
  const auto timeout = std::chrono::milliseconds(services_.handshakeTimeoutMs);
  reader.setDeadline(frame::StreamReader::Clock::now() + timeout);
  frame::IoStatus status = frame.readMessage(reader, services_.limits);
  reader.setDeadline(std::nullopt);
  if (status.timedOut) {
    spdlog::warn("handshake with {} failed: no complete Hello within {} ms (handshake_timeout_ms); dropped",
                 peer_.description, services_.handshakeTimeoutMs);
    return false;
  }
  if (!status.ok) {
    spdlog::warn("handshake with {} failed: {}", peer_.description, status.error);
    return false;
  }
  try {
    return greet(frame, reader);
  } catch (const kj::Exception& e) {
    spdlog::warn("handshake with {} failed: malformed Hello: {}", peer_.description, e.getDescription().cStr());
    return false;
  }
}

std::vector<gpu::Gpu*> Session::gpusFor(wire::Hello::Reader hello, bool& repeated) const {
  repeated = false;
  if (!hello.getRestrictDevices()) return services_.gpus;
  std::vector<std::string> entries, uuids;
  for (auto e : hello.getVisibleDevices()) entries.emplace_back(e.cStr());
  for (gpu::Gpu* g : services_.gpus) uuids.push_back(g->description().uuid);
  std::vector<gpu::Gpu*> out;
  for (size_t i : visibleDevices(entries, uuids, &repeated)) out.push_back(services_.gpus[i]);
  return out;
}

bool Session::adoptRings(wire::Hello::Reader hello, frame::StreamReader& reader) {
  if (hello.getSharedRingBytes() == 0 || !peer_.unixSocket) return false;
  if (!services_.sharedRings) {
    if (int fd = reader.takeFd(); fd >= 0) ::close(fd);  // shared_rings = false: the socket it is
    return false;
  }
  std::string why;
  std::shared_ptr<frame::SharedRings> rings = frame::SharedRings::adopt(reader.takeFd(), hello.getSharedRingBytes(), fd_, why);
  if (!rings) {
    spdlog::warn("tenant {} ({}): its shared ring is not used ({}); its calls go through the socket", tenantId_,
                 tenant_->name(), why);
    return false;
  }
  rings_ = std::move(rings);
  return true;
}

bool Session::greet(frame::IncomingFrame& frame, frame::StreamReader& reader) {
  auto message = frame.message().getRoot<wire::ClientMessage>();
  if (message.isJoinLane() && frame.bulkBytes() == 0) return serveLane(frame, reader);
  if (!message.isHello() || frame.bulkBytes() != 0) {
    refuse("the first message must be Hello");
    return false;
  }
  auto hello = message.getHello();
  if (hello.getProtocolVersion() != wire::PROTOCOL_VERSION) {
    refuse(fmt::format("client speaks Tally protocol {}, this tallyd speaks {}: upgrade the older side",
                       hello.getProtocolVersion(), wire::PROTOCOL_VERSION));
    return false;
  }
  std::optional<Admission> admission = admit(hello);
  if (!admission) return false;
  if (draining_.load(std::memory_order_relaxed)) {
    refuse("tallyd is draining", fmt::format(" (tenant {})", admission->name));
    return false;
  }
  if (std::string why = quarantineOf(admission->name); !why.empty()) {
    refuse(why);
    return false;
  }
  if (services_.faults != nullptr && services_.faults->verdict()) {
    refuse("the GPU's shared context was lost to a kernel fault and tallyd is starting over; retry in a second",
           fmt::format(" (tenant {})", admission->name));
    return false;
  }
  if (services_.gpus.empty()) {
    refuse("no GPU is visible to tallyd", fmt::format(" (tenant {})", admission->name));
    return false;
  }
  bool repeated = false;
  std::vector<gpu::Gpu*> gpus = gpusFor(hello, repeated);
  if (repeated) {
    refuse("CUDA_VISIBLE_DEVICES names a GPU twice", fmt::format(" (tenant {})", admission->name),
           CUDA_ERROR_INVALID_DEVICE);
    return false;
  }
  if (gpus.empty()) {
    refuse("CUDA_VISIBLE_DEVICES selects none of tallyd's GPUs", fmt::format(" (tenant {})", admission->name));
    return false;
  }
  tenant_ = std::make_unique<Tenant>(tenantId_, admission->name, admission->priority, gpus, admission->limits);
  // A launch thread that may not spin would sleep after every launch and cost a wake-up for the
  // next one: with hp_poll_us = 0 the session thread makes the launches itself.
  if (admission->priority == PriorityClass::kHigh && services_.highPriorityLaunchThread &&
      services_.highPriorityPollMicros > 0) {
    tenant_->startLaunchThread(std::chrono::microseconds(services_.highPriorityPollMicros));
  }
  if (services_.faults != nullptr) faultEvidence_ = services_.faults->enroll(tenantId_, admission->name);
  rateLimit_ = CallRateLimit(admission->limits.maxCallsPerSecond);
  if (services_.policy != nullptr) {
    const bool high = admission->priority == PriorityClass::kHigh;
    if (services_.policy->streamPriority(high, *services_.gpus.front())) tenant_->streams().setBand(high);
  }
  admittedAt_ = std::chrono::system_clock::now();
  admitted_.store(true, std::memory_order_release);
  spdlog::info("tenant {} ({}) connected from {} (host {}, pid {}), {}", tenantId_, admission->name, peer_.description,
               hello.getClientHost().cStr(), hello.getClientPid(), priorityText(admission->priority));

  capnp::MallocMessageBuilder reply;
  auto welcome = reply.initRoot<wire::ServerMessage>().initWelcome();
  welcome.setAccepted(true);
  welcome.setProtocolVersion(wire::PROTOCOL_VERSION);
  welcome.setTenantId(tenantId_);
  int driverVersion = 0;
  cuDriverGetVersion(&driverVersion);
  welcome.setDriverVersion(driverVersion);
  welcome.setSharedHostMemory(peer_.unixSocket);
  describeDevices(welcome, gpus);
  const bool ring = adoptRings(hello, reader);
  welcome.setSharedRing(ring);
  if (ring) tenant_->setCompletionWords(CompletionWords::adopt(rings_, gpus.empty() ? nullptr : gpus.front()));
  if (std::shared_ptr<BulkLanes> lanes = grantLanes(hello)) {
    welcome.setBulkLanes(static_cast<uint8_t>(lanes->count()));
    welcome.setLaneKey(kj::arrayPtr(lanes->key().data(), lanes->key().size()));
    tenant_->setLanes(std::move(lanes));
  }
  outbox_->send(reply);
  // The Welcome went through the socket; everything after it goes through the ring.
  if (ring) {
    outbox_->useRing(rings_);
    reader.useRing(&rings_->toServer());
  }
  return true;
}

std::shared_ptr<BulkLanes> Session::grantLanes(wire::Hello::Reader hello) {
  if (peer_.unixSocket || hello.getBulkLanes() == 0 || services_.lanes == nullptr || services_.maxBulkLanes == 0) {
    return nullptr;  // a Unix-socket tenant shares memory with tallyd instead
  }
  unsigned count = std::min<unsigned>({hello.getBulkLanes(), services_.maxBulkLanes, BulkLanes::kMaxLanes});
  auto lanes = std::make_shared<BulkLanes>(tenantId_, tenant_->name(), count, outbox_->records() != nullptr,
                                           peer_.tlsSubject);
  services_.lanes->add(lanes);
  return lanes;
}

bool Session::serveLane(frame::IncomingFrame& frame, frame::StreamReader& reader) {
  auto join = frame.message().getRoot<wire::ClientMessage>().getJoinLane();
  auto key = join.getKey();
  std::shared_ptr<BulkLanes> lanes = services_.lanes != nullptr ? services_.lanes->find(join.getTenantId()) : nullptr;
  std::string why = lanes == nullptr
                        ? fmt::format("no tenant {} with bulk lanes", join.getTenantId())
                        : lanes->join(join.getIndex(), std::span<const uint8_t>(key.begin(), key.size()),
                                      outbox_->records() != nullptr, peer_.tlsSubject, outbox_, fd_);
  if (!why.empty()) {
    refuse("bulk lane refused: " + why);
    return false;
  }
  capnp::MallocMessageBuilder reply;
  auto welcome = reply.initRoot<wire::ServerMessage>().initWelcome();
  welcome.setAccepted(true);
  welcome.setProtocolVersion(wire::PROTOCOL_VERSION);
  welcome.setTenantId(join.getTenantId());
  outbox_->send(reply);
  spdlog::debug("tenant {}: bulk lane {} joined from {}", join.getTenantId(), join.getIndex(), peer_.description);
  lanes->serve(join.getIndex(), reader, services_.limits);
  return false;
}

bool Session::serve(frame::StreamReader& reader) {
  frame::IncomingFrame frame;
  for (;;) {
    frame::IoStatus status = frame.readMessage(reader, services_.limits);
    if (!status.ok) {
      if (status.closed) {
        spdlog::info("tenant {} ({}) disconnected", tenantId_, tenant_->name());
      } else {
        spdlog::warn("tenant {} ({}) dropped: {}", tenantId_, tenant_->name(), status.error);
      }
      return false;
    }
    uint32_t bulkLeft = frame.bulkBytes();
    try {
      auto message = frame.message().getRoot<wire::ClientMessage>();
      if (!message.isCalls()) {
        spdlog::warn("tenant {} ({}) dropped: unexpected message after the handshake", tenantId_, tenant_->name());
        return false;
      }
      auto calls = message.getCalls();
      for (unsigned i = 0; i < calls.size(); ++i) {
        auto call = calls[i];
        // Only a run of launches is a burst: anything else may wait, or touch a stream's life,
        // and reaches the driver after the launches the launch thread still holds.
        if (!call.isLaunchKernel()) {
          drainLaunches();
          endOfBurst();
        }
        throttle();
        auto kind = static_cast<int32_t>(call.which());
        BusyMark busy(tenant_->counters(), kind);
        trace::recordCall(tenantId_, call.getId(), kind, trace::Stage::kRead);
        if (std::string why = services_.calls->run({*tenant_, outbox_, reader, bulkLeft, call, faultEvidence_,
                                                    i + 1 < calls.size()});
            !why.empty()) {
          spdlog::warn("tenant {} ({}) dropped: {}", tenantId_, tenant_->name(), why);
          return false;
        }
        trace::recordCall(tenantId_, call.getId(), kind, trace::Stage::kHandled);
      }
    } catch (const kj::Exception& e) {
      spdlog::warn("tenant {} ({}) dropped: malformed message: {}", tenantId_, tenant_->name(), e.getDescription().cStr());
      return false;
    }
    if (bulkLeft != 0) {
      spdlog::warn("tenant {} ({}) dropped: {} bulk bytes no call asked for", tenantId_, tenant_->name(), bulkLeft);
      return false;
    }
    // This thread is about to wait for the client (socket bytes not yet received are not seen;
    // a ring's are, at no cost).
    if (reader.usesRing() ? !reader.readableNow() : !reader.hasBuffered()) {
      drainLaunches();  // the burst's marks go after its launches
      endOfBurst();
    }
  }
}

void Session::drainLaunches() {
  if (LaunchThread* launches = tenant_->launchThread()) launches->drain();
}

void Session::endOfBurst() {
  if (services_.policy != nullptr) services_.policy->endOfBurst(tenantId_);
  if (faultEvidence_) faultEvidence_->writeMarks(gpu::FaultMonitor::writeMark);
}

// Holds the next call back while the tenant is over its max_calls_per_second.
void Session::throttle() {
  if (!rateLimit_.limited()) return;
  std::chrono::nanoseconds delay = rateLimit_.delayFor(CallRateLimit::Clock::now());
  if (delay.count() <= 0) return;
  if (!throttleLogged_) {
    throttleLogged_ = true;
    spdlog::info("tenant {} ({}) exceeds max_calls_per_second ({}): its calls are slowed down", tenantId_,
                 tenant_->name(), tenant_->limits().maxCallsPerSecond);
  }
  std::this_thread::sleep_for(delay);
  tenant_->counters().throttledMicros.fetch_add(static_cast<uint64_t>(delay.count() / 1000), std::memory_order_relaxed);
}

// If the client dies while this thread is inside a driver call that waits for the GPU (a
// module load or free waits for every stream of the context), the streams parked at this
// tenant's host callbacks must still be let go — without this thread.
uint64_t Session::watchForHangup() {
  if (services_.hangups == nullptr) return 0;
  return services_.hangups->watch(fd_, [waits = tenant_->hostWaits(), id = tenantId_, name = tenant_->name()] {
    if (size_t filled = waits->releaseAll(); filled > 0) {
      spdlog::info("tenant {} ({}) hung up: released {} host-callback wait(s) ahead of its thread", id, name, filled);
    }
  });
}

std::string Session::quarantineOf(const std::string& name) const {
  if (services_.faultHistory == nullptr) return {};
  auto until = services_.faultHistory->refusedUntil(name, FaultHistory::Clock::now());
  if (!until) return {};
  auto left = std::chrono::duration_cast<std::chrono::seconds>(*until - FaultHistory::Clock::now()).count();
  return fmt::format("tenant {} made the GPU fault {} times recently; refused for another {} s (fault_quarantine_s)",
                     name, services_.faultHistory->faultsByTenant()[name], left);
}

void Session::tellContextLost(const gpu::FaultVerdict& verdict) {
  if (!admitted_.load(std::memory_order_acquire)) return;
  const bool culprit = verdict.culprits.count(tenantId_) != 0;
  capnp::MallocMessageBuilder message;
  auto lost = message.initRoot<wire::ServerMessage>().initContextLost();
  lost.setStatus(culprit ? verdict.code : gpu::kContextResetError);
  auto names = lost.initFaultingTenants(static_cast<unsigned>(verdict.culprits.size()));
  unsigned i = 0;
  for (const auto& [id, name] : verdict.culprits) names.set(i++, name);
  lost.setReason(verdict.reason);
  outbox_->send(message);
}

bool Session::drainOutbox(std::chrono::milliseconds timeout) { return outbox_->drain(timeout); }

void Session::run() {
  frame::StreamReader reader(fd_);
  reader.useRecords(outbox_->records());
  reader.setSpinMicros(services_.pollMicros);
  if (handshake(reader)) {
    if (tenant_->priority() == PriorityClass::kHigh) {
      reader.setSpinMicros(services_.highPriorityPollMicros);
    } else {
      runNicer(services_.bestEffortNice);
    }
    uint64_t watch = watchForHangup();
    serve(reader);
    if (watch != 0) services_.hangups->unwatch(watch);
  }
  ::shutdown(fd_, SHUT_RDWR);
  if (tenant_ && tenant_->lanes()) {
    tenant_->lanes()->close();
    services_.lanes->remove(tenantId_);
  }
  if (tenant_) {
    // The scheduler first lets go of what it holds back for this tenant, so that release()'s
    // stream syncs finish; it frees its own per-tenant state once the streams are gone.
    if (services_.policy != nullptr) services_.policy->tenantEnding(tenant_->id());
    BusyMark busy(tenant_->counters(), TenantCounters::kBusyReleasing);
    tenant_->release();
    if (services_.policy != nullptr) services_.policy->tenantReleased(tenant_->id());
    if (faultEvidence_) services_.faults->leave(tenant_->id());
  }
  outbox_->close();
  if (onExit_) onExit_(*this);
}

}  // namespace tally::server::session
