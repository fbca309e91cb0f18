#include "server/transport/listener.h"

#include "server/transport/unix_socket_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace tally::server::transport {

struct Listener::State {
  ListenOptions options;
  ConnectionSink& sink;
  uv_loop_t loop{};
  std::vector<std::unique_ptr<uv_stream_t, void (*)(uv_stream_t*)>> servers;
  std::vector<std::string> unixPaths;
  std::vector<uv_stream_t*> tlsServers;
  // Cleared when the loop stops: a TLS handshake that ends later drops its connection.
  std::shared_ptr<std::atomic<bool>> accepting = std::make_shared<std::atomic<bool>>(true);
  uv_signal_t sigint{};
  uv_signal_t sigterm{};
  uv_async_t stopAsync{};
  ConnectionSlots slots;
  // Refusals for max_connections are logged at most once a second (a flood must not flood
  // the journal too); loop thread only.
  std::chrono::steady_clock::time_point lastRefusalLog{};
  uint64_t refusalsLogged = 0;
  size_t lingering = 0;  // refused connections still on the loop (LingeringRefusal)

  State(ListenOptions o, ConnectionSink& s) : options(std::move(o)), sink(s), slots(options.maxConnections) {}
};

namespace {

std::string describePeer(int fd, bool isUnix) {
  if (isUnix) {
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
      return fmt::format("unix pid={} uid={} gid={}", cred.pid, cred.uid, cred.gid);
    }
    return "unix (no credentials)";
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    if (addr.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
      port = ntohs(in->sin_port);
    } else if (addr.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
      ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
      port = ntohs(in6->sin6_port);
    }
  }
  return fmt::format("tcp {}:{}", host, port);
}

void closeHandle(uv_stream_t* handle) {
  if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(handle))) {
    uv_close(reinterpret_cast<uv_handle_t*>(handle), [](uv_handle_t* h) { std::free(h); });
  }
}

// Takes the accepted socket away from libuv: the tenant's session thread does blocking I/O.
int detachAccepted(uv_stream_t* client) {
  uv_os_fd_t fd;
  if (uv_fileno(reinterpret_cast<uv_handle_t*>(client), &fd) != 0) return -1;
  int owned = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (owned >= 0) ::fcntl(owned, F_SETFL, ::fcntl(owned, F_GETFL) & ~O_NONBLOCK);
  return owned;
}

// A connection refused for max_connections stays on the loop, without a thread, for up to
// kLingerMs: the refusal is written at once, then end of file, and what the peer sends (its
// Hello) is read and dropped until it closes. Closed at once, a Unix-socket peer writing its Hello would see only
// EPIPE, not the reason. At most kMaxLingering wait at once; more are closed right away.
constexpr uint64_t kLingerMs = 1000;
constexpr size_t kMaxLingering = 64;

struct LingeringRefusal {
  Listener::State* state;
  uv_stream_t* client;
  std::vector<char> bytes;
  uv_timer_t timer{};
  uv_write_t write{};
  uv_shutdown_t shutdown{};
  int handlesOpen = 2;
};

void endRefusal(LingeringRefusal* r) {
  if (uv_is_closing(reinterpret_cast<uv_handle_t*>(&r->timer))) return;
  auto onClosed = [](uv_handle_t* handle) {
    auto* r = static_cast<LingeringRefusal*>(handle->data);
    if (handle != reinterpret_cast<uv_handle_t*>(&r->timer)) std::free(handle);
    if (--r->handlesOpen == 0) {
      --r->state->lingering;
      delete r;
    }
  };
  uv_close(reinterpret_cast<uv_handle_t*>(r->client), onClosed);
  uv_close(reinterpret_cast<uv_handle_t*>(&r->timer), onClosed);
}

void lingerWithRefusal(Listener::State& state, uv_stream_t* client, std::vector<char> bytes) {
  auto* r = new LingeringRefusal{&state, client, std::move(bytes)};
  ++state.lingering;
  client->data = r;
  r->timer.data = r;
  uv_timer_init(&state.loop, &r->timer);
  uv_timer_start(&r->timer, [](uv_timer_t* t) { endRefusal(static_cast<LingeringRefusal*>(t->data)); }, kLingerMs, 0);
  uv_buf_t buffer = uv_buf_init(r->bytes.data(), static_cast<unsigned>(r->bytes.size()));
  // Then end of file: a peer that has read the refusal closes, and so ends the wait. A failed
  // write ends it through the read.
  uv_write(&r->write, client, &buffer, 1, [](uv_write_t* write, int status) {
    auto* r = static_cast<LingeringRefusal*>(write->handle->data);
    if (status == 0) uv_shutdown(&r->shutdown, write->handle, [](uv_shutdown_t*, int) {});
  });
  uv_read_start(
      client,
      [](uv_handle_t*, size_t, uv_buf_t* out) {
        static char discard[4096];
        *out = uv_buf_init(discard, sizeof(discard));
      },
      [](uv_stream_t* stream, ssize_t n, const uv_buf_t*) {
        if (n < 0) endRefusal(static_cast<LingeringRefusal*>(stream->data));
      });
}

// Over max_connections: no thread is started; the peer is told why (a TLS peer could not read
// a plaintext answer: closed) and the refusal is logged, at most once a second.
void refuseOverLimit(Listener::State& state, uv_stream_t* client, const Peer& peer, bool isTls) {
  std::string why = fmt::format("tallyd is at its connection limit (max_connections = {})", state.slots.limit());
  auto now = std::chrono::steady_clock::now();
  if (now - state.lastRefusalLog >= std::chrono::seconds(1)) {
    uint64_t since = state.slots.refused() - state.refusalsLogged;
    spdlog::warn("refused {}: {}{}", peer.description, why,
                 since > 1 ? fmt::format(" ({} connections refused since the last such line)", since) : "");
    state.lastRefusalLog = now;
    state.refusalsLogged = state.slots.refused();
  }
  if (isTls || state.lingering >= kMaxLingering) {
    closeHandle(client);
    return;
  }
  lingerWithRefusal(state, client, state.sink.refusalFrame(why));
}

void onConnection(uv_stream_t* server, int status) {
  auto* state = static_cast<Listener::State*>(server->data);
  if (status < 0) {
    spdlog::warn("accept failed: {}", uv_strerror(status));
    return;
  }
  bool isUnix = server->type == UV_NAMED_PIPE;
  uv_stream_t* client;
  if (isUnix) {
    auto* pipe = static_cast<uv_pipe_t*>(std::malloc(sizeof(uv_pipe_t)));
    uv_pipe_init(server->loop, pipe, 0);
    client = reinterpret_cast<uv_stream_t*>(pipe);
  } else {
    auto* tcp = static_cast<uv_tcp_t*>(std::malloc(sizeof(uv_tcp_t)));
    uv_tcp_init(server->loop, tcp);
    client = reinterpret_cast<uv_stream_t*>(tcp);
  }
  uv_os_fd_t acceptedFd = -1;
  if (uv_accept(server, client) != 0 || uv_fileno(reinterpret_cast<uv_handle_t*>(client), &acceptedFd) != 0) {
    closeHandle(client);
    spdlog::warn("could not take over an accepted connection");
    return;
  }
  Peer peer{describePeer(acceptedFd, isUnix), isUnix, {}};
  bool isTls = std::find(state->tlsServers.begin(), state->tlsServers.end(), server) != state->tlsServers.end();
  ConnectionSlot slot = state->slots.tryTake();
  if (!slot.held()) {
    refuseOverLimit(*state, client, peer, isTls);
    return;
  }
  int fd = detachAccepted(client);
  closeHandle(client);
  if (fd < 0) {
    spdlog::warn("could not take over an accepted connection");
    return;
  }
  address::tuneConnectedSocket(fd);
  if (!isTls) {
    state->sink.onConnection(fd, nullptr, std::move(peer), std::move(slot));
    return;
  }
  // The handshake blocks (up to handshake_timeout_ms): not on the loop.
  std::thread([&sink = state->sink, accepting = state->accepting, tls = state->options.tls, fd,
               timeoutMs = static_cast<int>(state->options.handshakeTimeoutMs), peer = std::move(peer),
               slot = std::move(slot)]() mutable {
    std::string error;
    tls::Session session = tls::start(*tls, fd, timeoutMs, error);
    peer.description = "tls" + peer.description.substr(3);  // "tcp HOST:PORT" -> "tls HOST:PORT"
    if (!session.records) {
      spdlog::warn("{}: refused: {}", peer.description, error);
      ::close(fd);
      return;
    }
    peer.tlsSubject = session.peerSubject;
    if (!peer.tlsSubject.empty()) peer.description += " " + peer.tlsSubject;
    if (!accepting->load()) {
      ::close(fd);
      return;
    }
    sink.onConnection(fd, std::move(session.records), std::move(peer), std::move(slot));
  }).detach();
}

// The socket file is made by unix_socket_file (directory checked, mode set without a path
// race); libuv only listens on it.
int bindUnix(Listener::State& state, const address::Endpoint& e, uv_stream_t*& out, std::string& error) {
  int fd = bindUnixSocket(e.path, state.options.unixSocketMode, error);
  if (fd < 0) return UV_EINVAL;
  auto* pipe = static_cast<uv_pipe_t*>(std::malloc(sizeof(uv_pipe_t)));
  uv_pipe_init(&state.loop, pipe, 0);
  out = reinterpret_cast<uv_stream_t*>(pipe);
  state.unixPaths.push_back(e.path);
  if (int rc = uv_pipe_open(pipe, fd); rc != 0) {
    ::close(fd);
    return rc;
  }
  return 0;
}

int bindTcp(Listener::State& state, const address::Endpoint& e, uv_stream_t*& out) {
  auto* tcp = static_cast<uv_tcp_t*>(std::malloc(sizeof(uv_tcp_t)));
  uv_tcp_init(&state.loop, tcp);
  out = reinterpret_cast<uv_stream_t*>(tcp);
  sockaddr_storage addr{};
  int rc = uv_ip4_addr(e.host.c_str(), e.port, reinterpret_cast<sockaddr_in*>(&addr));
  if (rc != 0) rc = uv_ip6_addr(e.host.c_str(), e.port, reinterpret_cast<sockaddr_in6*>(&addr));
  if (rc != 0) return rc;
  return uv_tcp_bind(tcp, reinterpret_cast<sockaddr*>(&addr), 0);
}

void stopLoop(Listener::State& state) {
  state.accepting->store(false);
  state.sink.onStop();
  for (auto& server : state.servers) closeHandle(server.release());
  state.servers.clear();
  uv_close(reinterpret_cast<uv_handle_t*>(&state.sigint), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&state.sigterm), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&state.stopAsync), nullptr);
}

}  // namespace

Listener::Listener(ListenOptions options, ConnectionSink& sink)
    : state_(std::make_unique<State>(std::move(options), sink)) {
  uv_loop_init(&state_->loop);
  state_->loop.data = state_.get();
  uv_async_init(&state_->loop, &state_->stopAsync, [](uv_async_t* a) { stopLoop(*static_cast<State*>(a->loop->data)); });
  uv_signal_init(&state_->loop, &state_->sigint);
  uv_signal_init(&state_->loop, &state_->sigterm);
}

Listener::~Listener() {
  for (const std::string& path : state_->unixPaths) removeSocketFile(path);
  uv_loop_close(&state_->loop);
}

bool Listener::bind(std::string& error) {
  for (const address::Endpoint& e : state_->options.endpoints) {
    uv_stream_t* server = nullptr;
    std::string why;
    int rc = e.kind == address::Endpoint::Kind::kUnix ? bindUnix(*state_, e, server, why) : bindTcp(*state_, e, server);
    if (server != nullptr) {
      server->data = state_.get();
      state_->servers.emplace_back(server, closeHandle);
      if (e.kind == address::Endpoint::Kind::kTls) state_->tlsServers.push_back(server);
    }
    if (e.kind == address::Endpoint::Kind::kTls && !state_->options.tls) {
      error = fmt::format("cannot listen on {}: no TLS certificate configured (tls_cert, tls_key)", e.toString());
      return false;
    }
    if (rc == 0) rc = uv_listen(server, 128, onConnection);
    if (rc != 0) {
      error = fmt::format("cannot listen on {}: {}", e.toString(), why.empty() ? uv_strerror(rc) : why);
      return false;
    }
    spdlog::info("listening on {}", e.toString());
  }
  return true;
}

void Listener::run() {
  auto onSignal = [](uv_signal_t* s, int signum) {
    spdlog::info("signal {}: stopping", signum);
    stopLoop(*static_cast<State*>(s->loop->data));
  };
  uv_signal_start(&state_->sigint, onSignal, SIGINT);
  uv_signal_start(&state_->sigterm, onSignal, SIGTERM);
  uv_run(&state_->loop, UV_RUN_DEFAULT);
}

void Listener::stop() { uv_async_send(&state_->stopAsync); }

const ConnectionSlots& Listener::connections() const { return state_->slots; }

}  // namespace tally::server::transport
