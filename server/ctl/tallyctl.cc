// tallyctl: talks to tallyd's control socket (admin_socket, schema/admin.capnp).
//   tallyctl [--socket PATH] status|tenants|stats|drain|undrain|evict ID
// Prints a human-readable answer and exits 0, or prints one line saying why and exits 1.
#include "common/frame/socket_io.h"
#include "schema/admin.capnp.h"

#include <CLI/CLI.hpp>
#include <capnp/message.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr int kTimeoutSeconds = 5;

struct Failure {
  std::string why;
};

// Connects to the control socket; throws Failure with the reason.
int connectAdmin(const std::string& path) {
  auto unreachable = [&](const char* why) {
    return Failure{fmt::format("cannot reach tallyd's control socket at {}: {}", path, why)};
  };
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) throw unreachable("path is empty or too long");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw unreachable(std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    ::close(fd);
    throw unreachable(std::strerror(err));
  }
  timeval timeout{kTimeoutSeconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  return fd;
}

// A table with a header row, columns padded to their widest cell.
void printTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += i + 1 < row.size() ? fmt::format("{:<{}}  ", row[i], widths[i]) : row[i];
    }
    fmt::print("{}\n", line);
  }
}

std::string bytesText(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string durationText(uint64_t seconds) {
  uint64_t days = seconds / 86400;
  std::string hms = fmt::format("{:02}:{:02}:{:02}", seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
  return days > 0 ? fmt::format("{}d {}", days, hms) : hms;
}

std::string localTime(int64_t unixSeconds) {
  std::time_t t = unixSeconds;
  std::tm tm{};
  localtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &tm);
  return text;
}

void printStatus(tally::wire::ServerStatus::Reader s) {
  fmt::print("version   {}\n", s.getVersion().cStr());
  fmt::print("uptime    {}\n", durationText(s.getUptimeSeconds()));
  fmt::print("gpus      {}\n", s.getGpus().size());
  for (auto g : s.getGpus()) fmt::print("  gpu {}   {}\n", g.getOrdinal(), g.getName().cStr());
  fmt::print("draining  {}\n", s.getDraining() ? "yes (new tenants are refused)" : "no");
  fmt::print("tenants   {}\n", s.getTenantCount());
  fmt::print("faults    {}\n", s.getFaults());
  if (s.getLastFault().size() > 0) fmt::print("  last    {}\n", s.getLastFault().cStr());
  for (auto t : s.getFaultsByTenant()) {
    std::string refused = t.getRefusedForSeconds() > 0 ? fmt::format(", refused for {} s more", t.getRefusedForSeconds()) : "";
    fmt::print("  tenant  {}: {} fault(s){}\n", t.getName().cStr(), t.getFaults(), refused);
  }
}

void printTenants(capnp::List<tally::wire::TenantInfo>::Reader tenants) {
  std::vector<std::vector<std::string>> rows{
      {"ID", "NAME", "PRIORITY", "MEMORY", "STREAMS", "CONNECTED", "BUSY-IN", "CALLBACKS-OWED", "PEER"}};
  for (auto t : tenants) {
    std::string busy = t.getBusyIn().size() == 0 ? "-" : fmt::format("{} ({:.1f} s)", t.getBusyIn().cStr(), t.getBusySeconds());
    rows.push_back({std::to_string(t.getId()), t.getName(), t.getHighPriority() ? "high" : "best-effort",
                    bytesText(t.getDeviceMemoryBytes()), std::to_string(t.getStreams()),
                    localTime(t.getConnectedSinceUnix()), busy, std::to_string(t.getHostCallbacksOwed()), t.getPeer()});
  }
  printTable(rows);
}

void printStats(capnp::List<tally::wire::TenantStats>::Reader stats) {
  std::vector<std::vector<std::string>> rows{
      {"ID", "NAME", "CALLS", "LAUNCHES", "SLICED", "PTB", "RETREATS", "CHAINED", "HELD", "HELD<10us/100us/1ms/10ms/more",
       "THROTTLED", "SYNC-WAITS(mean)", "H2D", "D2H"}};
  for (auto t : stats) {
    std::string histogram;
    for (uint64_t n : t.getHeldHistogram()) histogram += (histogram.empty() ? "" : "/") + std::to_string(n);
    rows.push_back({std::to_string(t.getId()), t.getName(), std::to_string(t.getCalls()),
                    std::to_string(t.getLaunches()), std::to_string(t.getSlicedLaunches()),
                    std::to_string(t.getPtbLaunches()), std::to_string(t.getPreemptions()),
                    std::to_string(t.getChainedLaunches()),
                    fmt::format("{} ({:.1f} ms)", t.getHeldLaunches(), t.getHeldMicros() / 1000.0),
                    histogram.empty() ? "-" : histogram, fmt::format("{:.1f} ms", t.getThrottledMicros() / 1000.0),
                    t.getSyncWaits() == 0 ? "-"
                                          : fmt::format("{} ({:.3f} ms)", t.getSyncWaits(),
                                                        t.getSyncWaitMicros() / 1000.0 / double(t.getSyncWaits())),
                    bytesText(t.getBytesHostToDevice()),
                    bytesText(t.getBytesDeviceToHost())});
  }
  printTable(rows);
}

// Sends the request built by `fill`, prints the reply; throws Failure.
void run(const std::string& socketPath, const std::function<void(tally::wire::AdminRequest::Builder)>& fill,
         const std::string& done) {
  int fd = connectAdmin(socketPath);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  capnp::MallocMessageBuilder request;
  fill(request.initRoot<tally::wire::AdminRequest>());
  kj::Array<capnp::word> words = tally::frame::flatten(request);
  if (auto sent = tally::frame::writeFrame(fd, words, {}); !sent.ok) {
    throw Failure{fmt::format("cannot send to tallyd at {}: {}", socketPath, sent.error)};
  }
  tally::frame::StreamReader reader(fd);
  tally::frame::IncomingFrame frame;
  tally::frame::FrameLimits limits{.maxMessageBytes = 64u << 20, .maxBulkBytes = 0};
  if (auto got = frame.readMessage(reader, limits); !got.ok) {
    throw Failure{fmt::format("no answer from tallyd at {}: {}", socketPath, got.error)};
  }
  auto reply = frame.message().getRoot<tally::wire::AdminReply>();
  if (!reply.getOk()) throw Failure{reply.getError()};
  switch (reply.which()) {
    case tally::wire::AdminReply::STATUS: printStatus(reply.getStatus()); break;
    case tally::wire::AdminReply::TENANTS: printTenants(reply.getTenants()); break;
    case tally::wire::AdminReply::STATS: printStats(reply.getStats()); break;
    default: fmt::print("{}\n", done); break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tallyctl: inspect and control a running tallyd through its control socket"};
  std::string socket = "/run/tally/tallyd-admin.sock";
  app.add_option("--socket", socket, "tallyd's control socket (its admin_socket): PATH or unix:PATH")
      ->capture_default_str();
  app.require_subcommand(1);
  auto* status = app.add_subcommand("status", "version, uptime, GPUs, draining, number of tenants");
  auto* tenants = app.add_subcommand("tenants", "the connected tenants");
  auto* stats = app.add_subcommand("stats", "per-tenant calls, launches and bytes copied");
  auto* drain = app.add_subcommand("drain", "refuse new tenants (connected ones keep running)");
  auto* undrain = app.add_subcommand("undrain", "admit new tenants again");
  auto* evict = app.add_subcommand("evict", "end a tenant's session; its resources are freed");
  uint64_t evictId = 0;
  evict->add_option("ID", evictId, "tenant id (see tallyctl tenants)")->required();
  CLI11_PARSE(app, argc, argv);
  if (socket.rfind("unix:", 0) == 0) socket = socket.substr(5);

  using Builder = tally::wire::AdminRequest::Builder;
  try {
    if (status->parsed()) run(socket, [](Builder r) { r.setStatus(); }, "");
    else if (tenants->parsed()) run(socket, [](Builder r) { r.setTenants(); }, "");
    else if (stats->parsed()) run(socket, [](Builder r) { r.setStats(); }, "");
    else if (drain->parsed()) run(socket, [](Builder r) { r.setDrain(true); }, "tallyd is draining: new tenants are refused");
    else if (undrain->parsed()) run(socket, [](Builder r) { r.setDrain(false); }, "tallyd admits new tenants");
    else run(socket, [&](Builder r) { r.setEvict(evictId); }, fmt::format("tenant {} evicted", evictId));
  } catch (const Failure& f) {
    std::fprintf(stderr, "tallyctl: %s\n", f.why.c_str());
    return 1;
  } catch (const kj::Exception& e) {
    std::fprintf(stderr, "tallyctl: malformed answer from tallyd: %s\n", e.getDescription().cStr());
    return 1;
  }
  return 0;
}
