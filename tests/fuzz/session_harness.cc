#include "tests/fuzz/session_harness.h"

#include "server/api/call_context.h"
#include "server/scheduler/passthrough_policy.h"
#include "server/session/session.h"
#include "tests/fuzz/hostile_client.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>

namespace tally::fuzz {
namespace {

constexpr size_t kModuleStoreBytes = 16u << 20;

// What tallyd shares between tenants, built once per process as server/main does.
struct Server {
  std::vector<std::unique_ptr<server::gpu::Gpu>> gpus;
  server::gpu::ModuleStore modules{kModuleStoreBytes};
  server::scheduler::PassthroughPolicy policy{server::scheduler::driverLauncher()};
  server::api::ApiServices apiServices;
  server::api::Dispatcher dispatcher{apiServices};
  server::session::SessionServices services;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> nextTenant{1};

  Server() {
    // A log line per call would be most of the time spent; TALLY_FUZZ_LOG=1 shows them.
    spdlog::set_level(std::getenv("TALLY_FUZZ_LOG") != nullptr ? spdlog::level::debug : spdlog::level::off);
    std::string error;
    gpus = server::gpu::Gpu::openAll(error);
    if (gpus.empty()) {
      std::fprintf(stderr, "session fuzzer: the fake GPU did not open: %s\n", error.c_str());
      std::abort();
    }
    for (auto& g : gpus) services.gpus.push_back(g.get());
    apiServices.gpus = services.gpus;
    apiServices.modules = &modules;
    services.policy = apiServices.policy = &policy;
    services.calls = &dispatcher;
    services.pollMicros = 0;  // the client answers at once or not at all
  }
};

Server& server() {
  static Server* s = new Server;  // never destroyed: its completion threads run to the end
  return *s;
}

}  // namespace

void runSession(const uint8_t* data, size_t size) {
  Server& s = server();
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) std::abort();
  server::session::PeerInfo peer{"fuzz socketpair", true, {}};
  auto session = std::make_shared<server::session::Session>(fds[1], nullptr, peer, s.services, s.nextTenant++, s.draining);
  std::promise<void> ended;
  session->start([&ended](server::session::Session&) { ended.set_value(); });
  {
    InputBytes in(data, size);
    HostileClient client(fds[0], in);
    client.run();
  }
  ::close(fds[0]);  // the disconnect: the session releases everything the tenant owned
  ended.get_future().wait();
  session->join();
}

}  // namespace tally::fuzz
