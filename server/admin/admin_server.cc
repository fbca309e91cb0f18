#include "server/admin/admin_server.h"

#include "common/frame/socket_io.h"
#include "schema/admin.capnp.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <capnp/schema.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#ifndef TALLY_VERSION
#define TALLY_VERSION "unknown"
#endif

namespace tally::server::admin {

namespace {

// Requests are a few words; nothing an admin peer sends may cost more than this.
constexpr frame::FrameLimits kAdminLimits{.maxMessageBytes = 4096, .maxBulkBytes = 0};
constexpr int kPeerTimeoutSeconds = 2;

struct PeerCred {
  uint32_t uid = 0;
  int pid = 0;
  bool known = false;
};

PeerCred peerCred(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return {};
  return PeerCred{cred.uid, cred.pid, true};
}

std::string describe(const PeerCred& peer) {
  return peer.known ? fmt::format("uid={} pid={}", peer.uid, peer.pid) : "uid=? (no credentials)";
}

bool fillSockaddr(const std::string& path, sockaddr_un& addr, std::string& error) {
  addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    error = fmt::format("control socket path '{}' is empty or longer than {} bytes", path, sizeof(addr.sun_path) - 1);
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return true;
}

// True if something accepts connections at `addr` (another tallyd's control socket).
bool someoneListens(const sockaddr_un& addr) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool live = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return live;
}

// Only the admitted sessions are tenants (a peer still in its handshake is not one yet).
void fillStatus(wire::ServerStatus::Builder status, AdminState& state) {
  status.setVersion(TALLY_VERSION);
  auto uptime = std::chrono::steady_clock::now() - state.startedAt;
  status.setUptimeSeconds(std::chrono::duration_cast<std::chrono::seconds>(uptime).count());
  auto gpus = status.initGpus(static_cast<unsigned>(state.gpuNames.size()));
  for (unsigned i = 0; i < state.gpuNames.size(); ++i) {
    gpus[i].setOrdinal(i);
    gpus[i].setName(state.gpuNames[i]);
  }
  status.setDraining(state.draining.load());
  status.setTenantCount(static_cast<uint32_t>(admitted(state.sessions).size()));
  if (state.faults == nullptr) return;
  status.setFaults(state.faults->total());
  status.setLastFault(state.faults->lastSummary());
  auto byTenant = state.faults->faultsByTenant();
  auto list = status.initFaultsByTenant(static_cast<unsigned>(byTenant.size()));
  unsigned i = 0;
  auto now = session::FaultHistory::Clock::now();
  for (const auto& [name, count] : byTenant) {
    list[i].setName(name);
    list[i].setFaults(count);
    if (auto until = state.faults->refusedUntil(name, now)) {
      list[i].setRefusedForSeconds(std::chrono::duration_cast<std::chrono::seconds>(*until - now).count());
    }
    ++i;
  }
}

// The name of what a tenant's thread is in (TenantCounters::busyCall): the call's field name in
// schema/envelope.capnp, from the compiled-in schema; empty when idle.
std::string busyCallName(int32_t call) {
  if (call == session::TenantCounters::kBusyIdle) return "";
  if (call == session::TenantCounters::kBusyReleasing) return "release";
  auto fields = capnp::Schema::from<wire::Call>().getUnionFields();
  return call >= 0 && static_cast<unsigned>(call) < fields.size() ? fields[call].getProto().getName() : "unknown";
}

// What the tenant's thread is in and the host callbacks it owes: read without the driver, so
// this answers while a driver call blocks every session (the case it is there to show).
void fillBusy(wire::TenantInfo::Builder out, const session::Tenant& t) {
  const session::TenantCounters& c = t.counters();
  if (std::string name = busyCallName(c.busyCall.load(std::memory_order_acquire)); !name.empty()) {
    out.setBusyIn(name);
    auto since = std::chrono::steady_clock::duration(c.busySinceNs.load(std::memory_order_relaxed));
    out.setBusySeconds(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch() - since).count());
  }
  out.setHostCallbacksOwed(static_cast<uint32_t>(t.hostWaits()->pending()));
}

void fillTenants(wire::AdminReply::Builder reply, AdminState& state) {
  std::vector<Admitted> tenants = admitted(state.sessions);
  auto list = reply.initTenants(static_cast<unsigned>(tenants.size()));
  for (unsigned i = 0; i < tenants.size(); ++i) {
    const auto& [s, t] = tenants[i];
    auto out = list[i];
    out.setId(t->id());
    out.setName(t->name());
    out.setPeer(s->peer().description);
    out.setHighPriority(t->priority() == session::PriorityClass::kHigh);
    out.setDeviceMemoryBytes(t->counters().memoryBytes.load(std::memory_order_relaxed));
    out.setStreams(t->counters().streams.load(std::memory_order_relaxed));
    out.setConnectedSinceUnix(
        std::chrono::duration_cast<std::chrono::seconds>(s->admittedAt().time_since_epoch()).count());
    fillBusy(out, *t);
  }
}

void fillStats(wire::AdminReply::Builder reply, AdminState& state) {
  std::vector<Admitted> tenants = admitted(state.sessions);
  auto list = reply.initStats(static_cast<unsigned>(tenants.size()));
  constexpr auto relaxed = std::memory_order_relaxed;
  for (unsigned i = 0; i < tenants.size(); ++i) {
    const session::TenantCounters& c = tenants[i].tenant->counters();
    auto out = list[i];
    out.setId(tenants[i].tenant->id());
    out.setName(tenants[i].tenant->name());
    out.setCalls(c.calls.load(relaxed));
    out.setLaunches(c.launches.load(relaxed));
    out.setSlicedLaunches(c.slicedLaunches.load(relaxed));
    out.setPtbLaunches(c.ptbLaunches.load(relaxed));
    out.setChainedLaunches(c.chainedLaunches.load(relaxed));
    out.setPreemptions(c.preemptions.load(relaxed));
    out.setHeldLaunches(c.held.count());
    out.setHeldMicros(c.held.totalMicros());
    out.setThrottledMicros(c.throttledMicros.load(relaxed));
    auto histogram = out.initHeldHistogram(metrics::LatencyHistogram::kBuckets);
    for (unsigned i = 0; i < metrics::LatencyHistogram::kBuckets; ++i) histogram.set(i, c.held.bucket(i));
    out.setSyncWaits(c.syncWaits->count());
    out.setSyncWaitMicros(c.syncWaits->totalMicros());
    out.setBytesHostToDevice(c.bytesHostToDevice.load(relaxed));
    out.setBytesDeviceToHost(c.bytesDeviceToHost.load(relaxed));
  }
}

void fail(wire::AdminReply::Builder reply, const std::string& why) {
  reply.setOk(false);
  reply.setError(why);
  reply.setNone();
}

// Answers one request into `reply`; queries are logged at debug, actions at info.
void answer(wire::AdminRequest::Reader request, wire::AdminReply::Builder reply, AdminState& state,
            const std::string& who) {
  reply.setOk(true);
  reply.setNone();
  switch (request.which()) {
    case wire::AdminRequest::STATUS:
      spdlog::debug("admin {}: status", who);
      fillStatus(reply.initStatus(), state);
      break;
    case wire::AdminRequest::TENANTS:
      spdlog::debug("admin {}: tenants", who);
      fillTenants(reply, state);
      break;
    case wire::AdminRequest::STATS:
      spdlog::debug("admin {}: stats", who);
      fillStats(reply, state);
      break;
    case wire::AdminRequest::DRAIN: {
      bool drain = request.getDrain();
      bool was = state.draining.exchange(drain);
      spdlog::info("admin {}: {}{}", who, drain ? "drain: new tenants are refused" : "undrain: new tenants are admitted",
                   was == drain ? " (unchanged)" : "");
      break;
    }
    case wire::AdminRequest::EVICT: {
      uint64_t id = request.getEvict();
      for (const auto& [s, t] : admitted(state.sessions)) {
        if (t->id() != id) continue;
        spdlog::info("admin {}: evicting tenant {} ({}) connected from {}", who, id, t->name(), s->peer().description);
        s->stop();
        return;
      }
      spdlog::info("admin {}: evict {}: no such tenant", who, id);
      fail(reply, fmt::format("no tenant {}", id));
      break;
    }
    default:
      spdlog::warn("admin {}: unknown request", who);
      fail(reply, "unknown request (tallyctl is newer than this tallyd)");
      break;
  }
}

}  // namespace

AdminServer::AdminServer(std::string path, AdminState state) : path_(std::move(path)), state_(std::move(state)) {}

AdminServer::~AdminServer() {
  if (thread_.joinable()) {
    char byte = 0;
    (void)!::write(wakePipe_[1], &byte, 1);
    thread_.join();
  }
  for (int fd : {listenFd_, wakePipe_[0], wakePipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (bound_) ::unlink(path_.c_str());
}

bool AdminServer::start(std::string& error) {
  sockaddr_un addr;
  if (!fillSockaddr(path_, addr, error)) return false;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  if (someoneListens(addr)) {
    error = fmt::format("cannot listen on control socket {}: another process serves it", path_);
    return false;
  }
  ::unlink(path_.c_str());  // a stale socket from a previous run
  listenFd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listenFd_ < 0) {
    error = fmt::format("cannot create the control socket: {}", std::strerror(errno));
    return false;
  }
  // Created 0600 from the start (no window with wider permissions), then chmod for certainty.
  mode_t oldMask = ::umask(0177);
  int rc = ::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int bindErrno = errno;
  ::umask(oldMask);
  if (rc != 0) {
    error = fmt::format("cannot listen on control socket {}: {}", path_, std::strerror(bindErrno));
    return false;
  }
  bound_ = true;
  if (::chmod(path_.c_str(), 0600) != 0 || ::listen(listenFd_, 8) != 0 || ::pipe2(wakePipe_, O_CLOEXEC) != 0) {
    error = fmt::format("cannot listen on control socket {}: {}", path_, std::strerror(errno));
    return false;
  }
  thread_ = std::thread([this] { serve(); });
  spdlog::info("control socket on unix:{} (mode 0600)", path_);
  return true;
}

void AdminServer::serve() {
  for (;;) {
    pollfd fds[2] = {{listenFd_, POLLIN, 0}, {wakePipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("control socket: poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    handle(fd);
    ::close(fd);
  }
}

void AdminServer::handle(int fd) {
  timeval timeout{kPeerTimeoutSeconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string who = describe(peerCred(fd));
  frame::StreamReader reader(fd, 4096 + sizeof(frame::FrameHeader));
  frame::IncomingFrame frame;
  frame::IoStatus status = frame.readMessage(reader, kAdminLimits);
  if (!status.ok) {
    if (!status.closed) spdlog::warn("admin {}: dropped: {}", who, status.error);
    return;
  }
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<wire::AdminReply>();
  try {
    answer(frame.message().getRoot<wire::AdminRequest>(), reply, state_, who);
  } catch (const kj::Exception& e) {
    spdlog::warn("admin {}: malformed request: {}", who, e.getDescription().cStr());
    fail(reply, "malformed request");
  }
  kj::Array<capnp::word> words = frame::flatten(message);
  status = frame::writeFrame(fd, words, {});
  if (!status.ok) spdlog::warn("admin {}: reply not sent: {}", who, status.error);
}

std::vector<Admitted> admitted(SessionSource& source) {
  std::vector<Admitted> out;
  for (auto& s : source.liveSessions()) {
    if (const session::Tenant* t = s->admittedTenant()) out.push_back({s, t});
  }
  return out;
}

}  // namespace tally::server::admin
