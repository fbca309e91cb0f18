// A Prometheus-format metrics endpoint (metrics_listen, e.g. "127.0.0.1:9464"): GET /metrics
// answers tallyd's and every admitted tenant's counters in the text exposition format. Plain
// HTTP on its own thread, one request at a time, 2 s socket timeouts; meant for a local
// scraper (bind it to loopback or put it behind the host's firewall).
#pragma once

#include "server/admin/admin_server.h"

#include <string>
#include <thread>

namespace tally::server::admin {

// The exposition text for `state` (what GET /metrics returns).
std::string renderMetrics(AdminState& state);

class MetricsServer {
 public:
  MetricsServer(std::string host, uint16_t port, AdminState state);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  bool start(std::string& error);

 private:
  void serve();
  void handle(int fd);

  std::string host_;
  uint16_t port_;
  AdminState state_;
  int listenFd_ = -1;
  int wakePipe_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace tally::server::admin
