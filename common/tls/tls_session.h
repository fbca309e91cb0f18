// TLS 1.3 for tallyd's TCP connections. The handshake runs on the socket; after it, OpenSSL
// only seals and opens records in memory (frame::RecordLayer) and the connection's own reader
// and writers move them on the socket, so TLS costs the cryptography and nothing else: no relay
// thread, no extra socket, and the same framing code as every transport (docs/security.md).
#pragma once

#include "common/frame/record_layer.h"

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
  std::unique_ptr<frame::RecordLayer> records;  // null when the handshake failed
  // The verified peer certificate's full subject in RFC 2253 form, e.g. "CN=inference-1,O=Example"
  // (most specific first, special characters escaped); "" when it sent none.
  std::string peerSubject;
};

// Runs the TLS handshake on the connected socket `fd` (at most `timeoutMs`) and leaves `fd`
// blocking, still the caller's, carrying the records of the returned layer. On failure
// `records` is null and `error` says why ("certificate verify failed", "wrong version number",
// a timeout, a server name OpenSSL cannot check ...); `fd` is then the caller's to close.
Session start(const Context& context, int fd, int timeoutMs, std::string& error);

}  // namespace tally::tls
