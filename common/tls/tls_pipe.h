// TLS 1.3 for tallyd's TCP connections, kept out of the framing code: after the handshake a
// pump thread moves bytes between the TLS connection and one end of a socketpair, and the
// caller does its ordinary blocking framed I/O on the other end. One copy per direction and a
// thread per connection, in exchange for one code path for every transport (docs/security.md).
#pragma once

#include <memory>
#include <string>

using SSL_CTX = struct ssl_ctx_st;

namespace tally::tls {

struct ServerConfig {
  std::string certFile;      // PEM: the server's certificate (chain)
  std::string keyFile;       // PEM: its private key
  std::string clientCaFile;  // PEM CA bundle: when set, clients must present a certificate it signed
};

struct ClientConfig {
  std::string caFile;      // PEM CA bundle the server's certificate must chain to (required)
  std::string certFile;    // optional client certificate (mutual TLS) ...
  std::string keyFile;     // ... and its key
  std::string serverName;  // name the server's certificate must carry (SNI and verification)
};

// An OpenSSL context limited to TLS 1.3.
class Context {
 public:
  static std::unique_ptr<Context> forServer(const ServerConfig& config, std::string& error);
  static std::unique_ptr<Context> forClient(const ClientConfig& config, std::string& error);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  SSL_CTX* native() const { return ctx_; }
  bool isServer() const { return server_; }
  const std::string& serverName() const { return serverName_; }

 private:
  Context(SSL_CTX* ctx, bool server, std::string serverName)
      : ctx_(ctx), server_(server), serverName_(std::move(serverName)) {}
  SSL_CTX* ctx_;
  bool server_;
  std::string serverName_;
};

struct Session {
  int plainFd = -1;         // blocking stream socket carrying the plaintext; owned by the caller
  // The verified peer certificate's full subject in RFC 2253 form, e.g. "CN=inference-1,O=Example"
  // (most specific first, special characters escaped); "" when it sent none.
  std::string peerSubject;
};

// Runs the TLS handshake on the connected socket `rawFd` (blocking, at most `timeoutMs`), then
// starts the pump thread, which owns `rawFd` from then on and ends when either side closes.
// On failure closes `rawFd` and returns nullopt-like (plainFd -1) with `error` saying why
// ("certificate verify failed", "wrong version number", a timeout, a server name OpenSSL
// cannot check ...).
Session start(const Context& context, int rawFd, int timeoutMs, std::string& error);

}  // namespace tally::tls
