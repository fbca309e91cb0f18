#include "common/address/address.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace tally::address {

std::string Endpoint::toString() const {
  if (kind == Kind::kUnix) return "unix:" + path;
  return fmt::format("{}://{}:{}", kind == Kind::kTls ? "tls" : "tcp", host, port);
}

std::optional<Endpoint> parseEndpoint(const std::string& text, std::string& error) {
  if (text.rfind("unix:", 0) == 0) {
    std::string path = text.substr(5);
    if (path.empty() || path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      error = fmt::format("bad unix socket path in '{}' (empty or longer than {} bytes)", text,
                          sizeof(sockaddr_un{}.sun_path) - 1);
      return std::nullopt;
    }
    return Endpoint{Endpoint::Kind::kUnix, path, {}, 0};
  }
  const bool tls = text.rfind("tls://", 0) == 0;
  if (tls || text.rfind("tcp://", 0) == 0) {
    std::string rest = text.substr(6);
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      error = fmt::format("expected {}://HOST:PORT, got '{}'", tls ? "tls" : "tcp", text);
      return std::nullopt;
    }
    std::string host = rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    unsigned port = 0;
    std::string portText = rest.substr(colon + 1);
    auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (ec != std::errc() || end != portText.data() + portText.size() || port > 65535) {
      error = fmt::format("bad port in '{}'", text);
      return std::nullopt;
    }
    return Endpoint{tls ? Endpoint::Kind::kTls : Endpoint::Kind::kTcp, {}, host, static_cast<uint16_t>(port)};
  }
  error = fmt::format("unknown endpoint '{}': use unix:/path, tls://host:port or tcp://host:port", text);
  return std::nullopt;
}

namespace {

bool waitConnected(int fd, int timeoutMs, std::string& error) {
  pollfd pfd{fd, POLLOUT, 0};
  int ready = ::poll(&pfd, 1, timeoutMs);
  if (ready == 0) {
    error = fmt::format("timed out after {} ms", timeoutMs);
    return false;
  }
  int soError = 0;
  socklen_t len = sizeof(soError);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &len);
  if (ready < 0 || soError != 0) {
    error = std::strerror(ready < 0 ? errno : soError);
    return false;
  }
  return true;
}

int connectSockaddr(int family, const sockaddr* addr, socklen_t len, int timeoutMs, std::string& error) {
  int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::strerror(errno);
    return -1;
  }
  if (::connect(fd, addr, len) != 0 && (errno != EINPROGRESS || !waitConnected(fd, timeoutMs, error))) {
    if (error.empty()) error = std::strerror(errno);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

int connectTo(const Endpoint& endpoint, int timeoutMs, std::string& error) {
  if (endpoint.kind == Endpoint::Kind::kUnix) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, endpoint.path.c_str(), endpoint.path.size() + 1);
    return connectSockaddr(AF_UNIX, reinterpret_cast<sockaddr*>(&addr), sizeof(addr), timeoutMs, error);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string port = std::to_string(endpoint.port);
  if (int rc = ::getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    error = fmt::format("cannot resolve '{}': {}", endpoint.host, gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = connectSockaddr(a->ai_family, a->ai_addr, a->ai_addrlen, timeoutMs, error);
  }
  ::freeaddrinfo(found);
  if (fd >= 0) tuneConnectedSocket(fd);
  return fd;
}

void tuneConnectedSocket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // harmless failure on UDS
  int buffer = 4 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
}

}  // namespace tally::address
