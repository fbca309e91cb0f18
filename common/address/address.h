// "unix:/path", "tls://host:port" and "tcp://host:port" endpoint strings, and blocking socket
// helpers. tls:// is TCP carrying TLS 1.3 (common/tls); tcp:// is plain, for loopback testing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tally::address {

struct Endpoint {
  enum class Kind { kUnix, kTcp, kTls } kind;
  std::string path;   // kUnix
  std::string host;   // kTcp, kTls
  uint16_t port = 0;  // kTcp, kTls

  std::string toString() const;
};

// Parses an endpoint; on failure returns nullopt and sets `error`.
std::optional<Endpoint> parseEndpoint(const std::string& text, std::string& error);

// Blocking connect with a timeout; returns the fd or -1 with `error` set.
int connectTo(const Endpoint& endpoint, int timeoutMs, std::string& error);

// Low-latency socket options for a connected stream socket (TCP_NODELAY on TCP).
void tuneConnectedSocket(int fd);

}  // namespace tally::address
