// tallyd's front door: a libuv loop that listens on Unix and TCP endpoints, accepts
// connections and hands each connected socket to a ConnectionSink. It knows no CUDA and no
// schema. The loop also owns signals, so SIGINT/SIGTERM stop tallyd cleanly.
#pragma once

#include "common/address/address.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tally::server::transport {

class ConnectionSink {
 public:
  virtual ~ConnectionSink() = default;
  // `fd` is a blocking, connected stream socket now owned by the sink.
  virtual void onConnection(int fd, std::string peerDescription) = 0;
  // Called on the loop thread when tallyd is asked to stop.
  virtual void onStop() = 0;
};

struct ListenOptions {
  std::vector<address::Endpoint> endpoints;
  unsigned unixSocketMode = 0660;
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

  struct State;  // libuv callbacks reach it through handle->data

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tally::server::transport
