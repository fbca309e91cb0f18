// tallyd's front door: a libuv loop that listens on Unix and TCP endpoints, accepts
// connections and hands each connected socket to a ConnectionSink. It knows no CUDA and no
// schema. The loop also owns signals, so SIGINT/SIGTERM stop tallyd cleanly.
#pragma once

#include "common/address/address.h"
#include "common/frame/record_layer.h"
#include "common/tls/tls_session.h"
#include "server/transport/connection_slots.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tally::server::transport {

// Who is at the other end of a connection.
struct Peer {
  std::string description;  // "unix pid=… uid=… gid=…", "tcp HOST:PORT" or "tls HOST:PORT [subject]"
  bool unixSocket = false;  // a real Unix-socket peer: SO_PEERCRED and fd passing apply
  std::string tlsSubject;   // the verified client certificate's subject (tls:// with client_ca)
};

class ConnectionSink {
 public:
  virtual ~ConnectionSink() = default;
  // `fd` is a blocking, connected stream socket now owned by the sink; for a tls:// peer it
  // carries the TLS records of `records` (null otherwise). `slot` counts it against
  // max_connections until the sink lets go of it. Called on the loop thread, or on a TLS
  // handshake thread.
  virtual void onConnection(int fd, std::unique_ptr<frame::RecordLayer> records, Peer peer, ConnectionSlot slot) = 0;
  // The bytes (one frame) that tell a peer over max_connections `why` it is refused; the loop
  // writes them (not to TLS peers, which are just closed). Called on the loop thread.
  virtual std::vector<char> refusalFrame(const std::string& why) = 0;
  // Called on the loop thread when tallyd is asked to stop.
  virtual void onStop() = 0;
};

struct ListenOptions {
  std::vector<address::Endpoint> endpoints;
  unsigned unixSocketMode = 0660;
  std::shared_ptr<const tls::Context> tls;  // required by tls:// endpoints
  size_t maxConnections = 256;              // connections held at once (ConnectionSlots)
  unsigned handshakeTimeoutMs = 5000;       // for the TLS handshake (the Hello gets its own)
};

class Listener {
 public:
  Listener(ListenOptions options, ConnectionSink& sink);
  ~Listener();

  // Binds every endpoint; false with `error` naming the endpoint that failed.
  bool bind(std::string& error);
  // Runs the loop until SIGINT/SIGTERM or stop().
  void run();
  // Thread-safe.
  void stop();
  // Connections held now, and refused for max_connections since the start. Thread-safe.
  const ConnectionSlots& connections() const;

  struct State;  // libuv callbacks reach it through handle->data

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tally::server::transport
