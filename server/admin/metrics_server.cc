#include "server/admin/metrics_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace tally::server::admin {
namespace {

// Prometheus label values: backslash, double quote and newline escaped.
std::string labelValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

void header(std::string& out, const Family& f) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
}

// One per-tenant histogram family (Prometheus: cumulative buckets, sum, count).
template <typename Tenants, typename Pick>
void histogram(std::string& out, const Family& f, const Tenants& tenants, Pick pick) {
  header(out, f);
  for (const auto& [session, t] : tenants) {
    const metrics::LatencyHistogram& h = pick(t->counters());
    std::string labels = fmt::format("tenant=\"{}\",id=\"{}\"", labelValue(t->name()), t->id());
    uint64_t cumulative = 0;
    for (size_t i = 0; i < metrics::LatencyHistogram::kBuckets; ++i) {
      cumulative += h.bucket(i);
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", f.name, labels, metrics::LatencyHistogram::kUpperBounds[i],
                         cumulative);
    }
    out += fmt::format("{}_sum{{{}}} {}\n", f.name, labels, h.totalMicros() / 1e6);
    out += fmt::format("{}_count{{{}}} {}\n", f.name, labels, h.count());
  }
}

}  // namespace

std::string renderMetrics(AdminState& state) {
  constexpr auto relaxed = std::memory_order_relaxed;
  std::string out;
  std::vector<Admitted> tenants = admitted(state.sessions);
  header(out, {"tally_up", "gauge", "1 while tallyd serves"});
  out += "tally_up 1\n";
  header(out, {"tally_uptime_seconds", "gauge", "seconds since tallyd started"});
  out += fmt::format("tally_uptime_seconds {}\n",
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - state.startedAt).count());
  header(out, {"tally_gpus", "gauge", "GPUs tallyd serves"});
  out += fmt::format("tally_gpus {}\n", state.gpuNames.size());
  if (state.smsKeptFromBestEffort) {
    header(out, {"tally_gpu_sms_kept_from_best_effort", "gauge",
                 "SMs best-effort work is kept off right now (the SM reserve the scheduler chose; 0: none)"});
    for (size_t i = 0; i < state.gpuNames.size(); ++i) {
      out += fmt::format("tally_gpu_sms_kept_from_best_effort{{gpu=\"{}\"}} {}\n", i, state.smsKeptFromBestEffort(i));
    }
  }
  if (state.liveStreams) {
    header(out, {"tally_gpu_hardware_queues", "gauge", "hardware work queues each GPU has for all tenants' streams"});
    out += fmt::format("tally_gpu_hardware_queues {}\n", state.hardwareQueues);
    header(out, {"tally_gpu_streams", "gauge",
                 "tenants' driver streams on the GPU; past tally_gpu_hardware_queues, streams share queues"});
    for (size_t i = 0; i < state.gpuNames.size(); ++i) {
      out += fmt::format("tally_gpu_streams{{gpu=\"{}\"}} {}\n", i, state.liveStreams(i));
    }
  }
  header(out, {"tally_draining", "gauge", "1 while new tenants are refused (tallyctl drain)"});
  out += fmt::format("tally_draining {}\n", state.draining.load() ? 1 : 0);
  header(out, {"tally_tenants", "gauge", "admitted tenants"});
  out += fmt::format("tally_tenants {}\n", tenants.size());
  if (state.faults != nullptr) {
    header(out, {"tally_gpu_faults_total", "counter", "faults of a shared context since tallyd first started"});
    out += fmt::format("tally_gpu_faults_total {}\n", state.faults->total());
    header(out, {"tally_tenant_gpu_faults_total", "counter", "faults blamed on a tenant (by name)"});
    for (const auto& [name, count] : state.faults->faultsByTenant()) {
      out += fmt::format("tally_tenant_gpu_faults_total{{tenant=\"{}\"}} {}\n", labelValue(name), count);
    }
  }

  const Family counters[] = {
      {"tally_tenant_device_memory_bytes", "gauge", "device memory the tenant holds"},
      {"tally_tenant_streams", "gauge", "streams the tenant created"},
      {"tally_tenant_calls_total", "counter", "calls dispatched"},
      {"tally_tenant_launches_total", "counter", "kernel launches"},
      {"tally_tenant_sliced_launches_total", "counter", "launches run as sliced kernel variants"},
      {"tally_tenant_ptb_launches_total", "counter", "launches run as preemptible PTB kernel variants"},
      {"tally_tenant_chained_launches_total", "counter",
       "high-priority launches run as chained kernel variants (the next kernel takes the SMs this one frees)"},
      {"tally_tenant_copied_bytes_total", "counter", "bytes copied, by direction"},
  };
  for (const Family& f : counters) {
    header(out, f);
    for (const auto& [session, t] : tenants) {
      const session::TenantCounters& c = t->counters();
      std::string labels = fmt::format("tenant=\"{}\",id=\"{}\",priority=\"{}\"", labelValue(t->name()), t->id(),
                                       t->priority() == session::PriorityClass::kHigh ? "high" : "best-effort");
      std::string name = f.name;
      if (name == "tally_tenant_copied_bytes_total") {
        out += fmt::format("{}{{{},direction=\"h2d\"}} {}\n", name, labels, c.bytesHostToDevice.load(relaxed));
        out += fmt::format("{}{{{},direction=\"d2h\"}} {}\n", name, labels, c.bytesDeviceToHost.load(relaxed));
        continue;
      }
      uint64_t value = name == "tally_tenant_device_memory_bytes" ? c.memoryBytes.load(relaxed)
                       : name == "tally_tenant_streams"           ? c.streams.load(relaxed)
                       : name == "tally_tenant_calls_total"       ? c.calls.load(relaxed)
                       : name == "tally_tenant_launches_total"    ? c.launches.load(relaxed)
                       : name == "tally_tenant_sliced_launches_total" ? c.slicedLaunches.load(relaxed)
                       : name == "tally_tenant_chained_launches_total" ? c.chainedLaunches.load(relaxed)
                                                                      : c.ptbLaunches.load(relaxed);
      out += fmt::format("{}{{{}}} {}\n", name, labels, value);
    }
  }
  histogram(out, {"tally_tenant_queueing_delay_seconds", "histogram",
                  "how long the scheduler held back best-effort launches"},
            tenants, [](const session::TenantCounters& c) -> const metrics::LatencyHistogram& { return c.held; });
  histogram(out, {"tally_tenant_sync_wait_seconds", "histogram",
                  "how long synchronizing calls waited for the GPU (for inference: a request latency estimate)"},
            tenants, [](const session::TenantCounters& c) -> const metrics::LatencyHistogram& { return *c.syncWaits; });
  header(out, {"tally_tenant_throttled_seconds_total", "counter",
               "how long the tenant's calls waited for its max_calls_per_second"});
  for (const auto& [session, t] : tenants) {
    out += fmt::format("tally_tenant_throttled_seconds_total{{tenant=\"{}\",id=\"{}\"}} {}\n", labelValue(t->name()),
                       t->id(), t->counters().throttledMicros.load(relaxed) / 1e6);
  }
  return out;
}

MetricsServer::MetricsServer(std::string host, uint16_t port, AdminState state)
    : host_(std::move(host)), port_(port), state_(state) {}

MetricsServer::~MetricsServer() {
  if (wakePipe_[1] >= 0) {
    char one = 1;
    (void)!::write(wakePipe_[1], &one, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listenFd_, wakePipe_[0], wakePipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

bool MetricsServer::start(std::string& error) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  if (::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1) {
    error = fmt::format("metrics_listen: '{}' is not an IPv4 address", host_);
    return false;
  }
  listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (listenFd_ < 0 || ::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listenFd_, 16) != 0 || ::pipe2(wakePipe_, O_CLOEXEC) != 0) {
    error = fmt::format("cannot serve metrics on {}:{}: {}", host_, port_, std::strerror(errno));
    return false;
  }
  thread_ = std::thread([this] { serve(); });
  spdlog::info("metrics on http://{}:{}/metrics", host_, port_);
  return true;
}

void MetricsServer::serve() {
  while (true) {
    pollfd fds[2] = {{listenFd_, POLLIN, 0}, {wakePipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;
    if (fds[1].revents != 0) return;
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval timeout{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    handle(fd);
    ::close(fd);
  }
}

void MetricsServer::handle(int fd) {
  char request[4096];
  ssize_t n = ::recv(fd, request, sizeof(request) - 1, 0);
  if (n <= 0) return;
  request[n] = '\0';
  bool metrics = std::strncmp(request, "GET /metrics ", 13) == 0 || std::strncmp(request, "GET /metrics?", 13) == 0;
  std::string body = metrics ? renderMetrics(state_) : "not found: GET /metrics\n";
  std::string response = fmt::format(
      "HTTP/1.0 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      metrics ? "200 OK" : "404 Not Found", metrics ? "text/plain; version=0.0.4" : "text/plain", body.size(), body);
  for (size_t sent = 0; sent < response.size();) {
    ssize_t w = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (w <= 0) return;
    sent += static_cast<size_t>(w);
  }
}

}  // namespace tally::server::admin
