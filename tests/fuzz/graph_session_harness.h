// The harness of the session tests (graph_session_test.cc, array_session_test.cc,
// completion_word_test.cc): tallyd's real request handlers on the fake GPU, one tenant per
// Session over a socketpair, driven call by call (Tenant).
#pragma once

#include "common/frame/frame.h"
#include "common/frame/shared_ring.h"
#include "common/frame/socket_io.h"
#include "common/hash/content_hash.h"
#include "schema/envelope.capnp.h"
#include "server/api/call_context.h"
#include "server/scheduler/passthrough_policy.h"
#include "server/session/session.h"

#include <capnp/message.h>
#include <capnp/schema.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>


namespace tally {
namespace {

using server::api::ApiServices;
namespace session = server::session;

constexpr uint64_t kLegacy = 1;  // the tenant's legacy default stream of device 0
constexpr uint64_t kStream = (1u << 16) + 1;
constexpr uint64_t kOtherStream = (1u << 16) + 2;
constexpr uint64_t kBlockingStream = (1u << 16) + 3;
constexpr uint64_t kModule = 0x30001;
constexpr uint64_t kFunction = 0x40001;  // "add": params (ptr, u32, ptr) at offsets 0, 8, 16
constexpr uint64_t kEvent = 0x5e001;
constexpr uint64_t kOtherEvent = 0x5e002;
constexpr size_t kParamBytes = 24;

// The fake GPU, opened once for the process.
std::vector<server::gpu::Gpu*> openGpus() {
  static auto* gpus = [] {
    std::string error;
    auto* opened = new std::vector<std::unique_ptr<server::gpu::Gpu>>(server::gpu::Gpu::openAll(error));
    if (opened->empty()) throw std::runtime_error("the fake GPU did not open: " + error);
    return opened;
  }();
  std::vector<server::gpu::Gpu*> out;
  for (auto& g : *gpus) out.push_back(g.get());
  return out;
}

// What tallyd shares between tenants, built once per policy as server/main builds it.
struct Server {
  static std::unique_ptr<server::scheduler::Policy> makePolicy(const std::string& name) {
    std::string error;
    server::scheduler::SchedulerConfig config;
    config.policy = name;
    auto made = server::scheduler::makePolicy(config, openGpus(), error);
    if (!made) throw std::runtime_error("no policy: " + error);
    return made;
  }

  server::gpu::ModuleStore modules{16u << 20};
  std::unique_ptr<server::scheduler::Policy> policy;
  ApiServices apiServices;
  server::api::Dispatcher dispatcher{apiServices};
  session::SessionServices services;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> nextTenant{1};

  explicit Server(const std::string& policyName) : Server(makePolicy(policyName)) {}
  explicit Server(std::unique_ptr<server::scheduler::Policy> chosen) : policy(std::move(chosen)) {
    spdlog::set_level(spdlog::level::warn);
    services.gpus = openGpus();
    apiServices.gpus = services.gpus;
    apiServices.modules = &modules;
    services.policy = apiServices.policy = policy.get();
    services.calls = &dispatcher;
    services.pollMicros = 0;
  }
};

// Never destroyed: completion and scheduler threads run to the end of the process.
Server& server() {
  static auto* s = new Server("passthrough");
  return *s;
}

[[maybe_unused]] Server& priorityServer() {
  static auto* s = new Server("priority");
  return *s;
}

// Passthrough, noting what each kernel launch asked of the scheduler.
class RecordingPolicy final : public server::scheduler::Policy {
 public:
  const char* name() const override { return "recording"; }
  std::optional<int> streamPriority(bool, const server::gpu::Gpu&) const override { return std::nullopt; }
  server::gpu::Placement placement(bool, server::gpu::Gpu&) override { return server::gpu::Placement::wholeGpu(); }
  void observeHpWait(server::gpu::Gpu&, uint64_t, double) override {}
  unsigned smsKeptFromBestEffort(server::gpu::Gpu&) override { return 0; }
  CUresult launch(const server::scheduler::KernelLaunch& k) override {
    mustNotHold.push_back(k.mustNotHold);
    return passthrough_.launch(k);
  }
  CUresult runOpaque(const server::scheduler::OpaqueWork& w) override { return passthrough_.runOpaque(w); }
  void afterWork(uint64_t, bool, uint64_t, server::gpu::Gpu&, CUstream) override {}
  void endOfBurst(uint64_t) override {}
  void tenantEnding(uint64_t) override {}
  void tenantReleased(uint64_t) override {}
  std::string summary() const override { return "recording"; }
  bool chainsHighPriority() const override { return false; }

  std::vector<bool> mustNotHold;  // per launch, in order (one tenant at a time)

 private:
  server::scheduler::PassthroughPolicy passthrough_{server::scheduler::driverLauncher()};
};

[[maybe_unused]] Server& recordingServer(RecordingPolicy*& recording) {
  static RecordingPolicy* policy = nullptr;
  static auto* s = [] {
    auto owned = std::make_unique<RecordingPolicy>();
    policy = owned.get();
    return new Server(std::move(owned));
  }();
  recording = policy;
  return *s;
}

// A count the fake driver keeps for tests (fake_gpu/fake_libcuda.cc, which the driver shim
// dlopened as libcuda.so.1), by the name it exports it under.
[[maybe_unused]] size_t fakeDriverCount(const char* name) {
  openGpus();  // loads the driver
  void* fake = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void* symbol = fake != nullptr ? ::dlsym(fake, name) : nullptr;
  if (fake != nullptr) ::dlclose(fake);
  if (symbol == nullptr) throw std::runtime_error(std::string("the fake driver has no ") + name);
  return reinterpret_cast<size_t (*)()>(symbol)();
}

// Graphs and executable graphs the fake driver holds.
[[maybe_unused]] size_t liveGraphs() { return fakeDriverCount("tallyFakeLiveGraphs"); }

struct Answer {
  CUresult status = CUDA_ERROR_UNKNOWN;
  CUresult deferred = CUDA_SUCCESS;
  uint64_t value = 0;
  std::vector<uint8_t> nodeTypes;
  uint64_t nodeFunction = 0;
  std::vector<uint8_t> nodeParams;
  std::vector<std::pair<uint32_t, uint32_t>> edges;  // (from, to) node ids
  uint64_t memsetDst = 0;
  uint32_t memsetValue = 0;
  std::string linkImage, linkInfoLog, linkErrorLog;  // Reply.link
};

// One tenant, driven call by call over a socketpair to a real Session.
class Tenant {
 public:
  // `sharedRings`: the tenant's frames go through shared rings, as a Unix-socket client's do.
  explicit Tenant(Server& s, wire::PriorityClass priority = wire::PriorityClass::BEST_EFFORT, bool sharedRings = false) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair");
    fd_ = fds[0];
    out_.fd = fd_;
    reader_ = std::make_unique<frame::StreamReader>(fd_, 16u << 10);
    session::PeerInfo peer{"graph test socketpair", true, {}};
    session_ = std::make_shared<session::Session>(fds[1], nullptr, peer, s.services, s.nextTenant++, s.draining);
    session_->start([this](session::Session&) { ended_.set_value(); });
    hello(priority, sharedRings);
  }
  ~Tenant() { leave(); }

  // The disconnect: the session releases everything the tenant owned.
  void leave() {
    if (fd_ < 0) return;
    if (rings_) rings_->toServer().close();
    ::close(fd_);
    fd_ = -1;
    ended_.get_future().wait();
    session_->join();
  }

  // `fd` (>= 0) rides along as SCM_RIGHTS (a hostRegister's memfd).
  Answer call(const std::function<void(wire::Call::Builder)>& build, const std::string& bulk = {}, int fd = -1) {
    uint64_t id = nextId_++;
    send(id, build, bulk, fd);
    return await(id);
  }
  // The id the next call will carry.
  uint64_t nextId() const { return nextId_; }
  void post(const std::function<void(wire::Call::Builder)>& build) { send(0, build, {}); }

  // Setup most tests share: the "add" kernel, a 64-byte allocation, a non-blocking stream.
  uint64_t prepare() {
    std::string image = "fake cubin for graph tests";
    hash::ContentHash hash = hash::contentHash(image.data(), image.size());
    EXPECT_EQ(call([&](wire::Call::Builder c) {
                auto m = c.initModuleLoad();
                m.setModule(kModule);
                m.setHash(kj::arrayPtr(hash.data(), hash.size()));
                m.setKind(wire::ImageKind::CUBIN);
                m.setImageSize(image.size());
                m.setHasImage(true);
              }, image).status, CUDA_SUCCESS);
    EXPECT_EQ(call([](wire::Call::Builder c) {
                auto f = c.initModuleGetFunction();
                f.setModule(kModule);
                f.setFunction(kFunction);
                f.setName("add");
              }).status, CUDA_SUCCESS);
    Answer a = call([](wire::Call::Builder c) { c.initMemAlloc().setSize(64); });
    EXPECT_EQ(a.status, CUDA_SUCCESS);
    post([&](wire::Call::Builder c) {  // device memory starts undefined
      auto m = c.initMemset();
      m.setStream(kLegacy);
      m.setDst(a.value);
      m.setWidth(64);
    });
    createStream(kStream, true);
    return a.value;
  }

  void createStream(uint64_t id, bool nonBlocking) {
    post([&](wire::Call::Builder c) {
      auto s = c.initStreamCreate();
      s.setStream(id);
      s.setNonBlocking(nonBlocking);
    });
  }

  // One-way "add" launch on `stream`, adding to the u32 at `counter`; `programmatic`: with
  // programmatic stream serialization.
  void launchAdd(uint64_t stream, uint64_t counter, bool programmatic = false) {
    post([&](wire::Call::Builder c) {
      auto l = c.initLaunchKernel();
      l.setFunction(kFunction);
      if (programmatic) {
        auto a = l.initAttributes(1)[0];
        a.setId(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
        a.initValue().setX(1);
      }
      for (auto d : {l.initGrid(), l.initBlock()}) {
        d.setX(1);
        d.setY(1);
        d.setZ(1);
      }
      l.setStream(stream);
      std::vector<uint8_t> params(kParamBytes, 0);
      std::memcpy(params.data(), &counter, sizeof(counter));
      l.setParams(kj::arrayPtr(params.data(), params.size()));
    });
  }

  Answer beginCapture(uint64_t stream, uint32_t mode = CU_STREAM_CAPTURE_MODE_GLOBAL) {
    return call([&](wire::Call::Builder c) {
      auto b = c.initStreamBeginCapture();
      b.setStream(stream);
      b.setMode(mode);
    });
  }
  Answer endCapture(uint64_t stream, uint64_t graph) {
    return call([&](wire::Call::Builder c) {
      auto e = c.initStreamEndCapture();
      e.setStream(stream);
      e.setGraph(graph);
    });
  }
  Answer instantiate(uint64_t graph, uint64_t exec) {
    return call([&](wire::Call::Builder c) {
      auto i = c.initGraphInstantiate();
      i.setGraph(graph);
      i.setExec(exec);
    });
  }
  void launchGraph(uint64_t exec, uint64_t stream) {
    post([&](wire::Call::Builder c) {
      auto l = c.initGraphLaunch();
      l.setExec(exec);
      l.setStream(stream);
    });
  }
  // One-way stream memory operation (schema/stream.capnp StreamMemOps): one 32-bit write, or
  // any one operation.
  void writeValue32(uint64_t stream, uint64_t address, uint32_t value) {
    memOp(stream, CU_STREAM_MEM_OP_WRITE_VALUE_32, address, value, 0);
  }
  void memOp(uint64_t stream, uint32_t operation, uint64_t address, uint64_t value, uint32_t flags) {
    post([&](wire::Call::Builder c) {
      auto m = c.initStreamMemOps();
      m.setStream(stream);
      auto op = m.initOps(1)[0];
      op.setOperation(operation);
      op.setAddress(address);
      op.setValue(value);
      op.setFlags(flags);
    });
  }
  // Completion word `slot` of the ring file (a tenant made with sharedRings).
  uint32_t completionWord(unsigned slot) { return rings_->completionWord(slot).load(std::memory_order_acquire); }
  // The bytes of the last device-to-host copy answered (HostData or the reply's own bulk).
  const std::vector<char>& lastData() const { return lastData_; }

  Answer synchronize(uint64_t stream) {
    return call([&](wire::Call::Builder c) { c.initStreamSynchronize().setStream(stream); });
  }

  // The u32 at `address`, read on the legacy default stream through staging.
  uint32_t read(uint64_t address) {
    uint64_t id = nextId_++;
    send(id, [&](wire::Call::Builder c) {
      auto m = c.initMemcpy();
      m.setKind(wire::CopyKind::DEVICE_TO_HOST);
      m.setStream(kLegacy);
      m.setSrc(address);
      m.setWidth(sizeof(uint32_t));
      m.setToken(77);
    }, {});
    lastData_.clear();
    Answer a = await(id);
    EXPECT_EQ(a.status, CUDA_SUCCESS);
    EXPECT_EQ(a.deferred, CUDA_SUCCESS);
    uint32_t value = 0;
    if (lastData_.size() == sizeof(value)) std::memcpy(&value, lastData_.data(), sizeof(value));
    return value;
  }

 private:
  void hello(wire::PriorityClass priority, bool sharedRings) {
    capnp::MallocMessageBuilder message;
    auto h = message.initRoot<wire::ClientMessage>().initHello();
    if (sharedRings) {
      std::string why;
      rings_ = frame::SharedRings::create(frame::SharedRings::kMinCapacity, fd_, why);
      ASSERT_NE(rings_, nullptr) << why;
      h.setSharedRingBytes(static_cast<uint32_t>(rings_->capacity()));
    }
    h.setProtocolVersion(wire::PROTOCOL_VERSION);
    h.setTenantName("graph-test");
    h.setPriority(priority);
    h.setClientHost("test");
    h.setCudaRuntimeVersion(13000);
    kj::Array<capnp::word> words = frame::flatten(message);
    ASSERT_TRUE(frame::writeFrame(fd_, words, {}, rings_ ? rings_->fd() : -1).ok);
    frame::IncomingFrame incoming;
    ASSERT_TRUE(incoming.readMessage(*reader_, limits()).ok);
    auto welcome = incoming.message().getRoot<wire::ServerMessage>();
    ASSERT_TRUE(welcome.isWelcome());
    ASSERT_TRUE(welcome.getWelcome().getAccepted()) << welcome.getWelcome().getError().cStr();
    if (rings_) {
      ASSERT_TRUE(welcome.getWelcome().getSharedRing());
      reader_->useRing(&rings_->toClient());
      out_.ring = &rings_->toServer();
    }
  }

  static frame::FrameLimits limits() {
    frame::FrameLimits l;
    l.maxBulkBytes = 1u << 20;
    return l;
  }

  void send(uint64_t id, const std::function<void(wire::Call::Builder)>& build, const std::string& bulk,
            int fdToSend = -1) {
    capnp::MallocMessageBuilder message;
    auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
    call.setId(id);
    build(call);
    kj::Array<capnp::word> words = frame::flatten(message);
    iovec part{const_cast<char*>(bulk.data()), bulk.size()};
    ASSERT_TRUE(frame::writeFrame(out_, words, std::span<const iovec>(&part, bulk.empty() ? 0 : 1), fdToSend).ok);
  }

  Answer await(uint64_t id) {
    reader_->setDeadline(frame::StreamReader::Clock::now() + std::chrono::seconds(10));
    for (;;) {
      frame::IncomingFrame incoming;
      if (!incoming.readMessage(*reader_, limits()).ok) return Answer{};  // CUDA_ERROR_UNKNOWN: dropped
      auto message = incoming.message().getRoot<wire::ServerMessage>();
      std::vector<char> bulk(incoming.bulkBytes());
      if (!bulk.empty() && !reader_->read(bulk.data(), bulk.size()).ok) return Answer{};  // CUDA_ERROR_UNKNOWN: dropped
      if (message.isHostData()) lastData_.assign(bulk.begin(), bulk.end());
      if (!message.isReply() || message.getReply().getId() != id) continue;
      auto reply = message.getReply();
      if (reply.getDataToken() != 0) lastData_.assign(bulk.begin(), bulk.end());
      return answerOf(reply);
    }
  }

  static Answer answerOf(wire::Reply::Reader reply) {
    Answer a;
    a.status = static_cast<CUresult>(reply.getStatus());
    a.deferred = static_cast<CUresult>(reply.getDeferredStatus());
    if (reply.isValue()) a.value = reply.getValue();
    if (reply.isLink()) {
      auto link = reply.getLink();
      a.linkImage.assign(reinterpret_cast<const char*>(link.getImage().begin()), link.getImage().size());
      a.linkInfoLog = link.getInfoLog();
      a.linkErrorLog = link.getErrorLog();
    }
    if (reply.isGraph()) {
      auto graph = reply.getGraph();
      if (graph.isNodeTypes()) {
        for (uint8_t t : graph.getNodeTypes()) a.nodeTypes.push_back(t);
      } else if (graph.isKernelNode()) {
        a.nodeFunction = graph.getKernelNode().getFunction();
        auto params = graph.getKernelNode().getParams();
        a.nodeParams.assign(params.begin(), params.end());
      } else if (graph.isMemsetNode()) {
        a.memsetDst = graph.getMemsetNode().getDst();
        a.memsetValue = graph.getMemsetNode().getValue();
      } else if (graph.isEdges()) {
        auto from = graph.getEdges().getFrom(), to = graph.getEdges().getTo();
        for (unsigned i = 0; i < from.size() && i < to.size(); ++i) a.edges.emplace_back(from[i], to[i]);
      }
    }
    return a;
  }

  int fd_ = -1;
  std::unique_ptr<frame::SharedRings> rings_;  // a tenant made with sharedRings
  frame::Channel out_;                          // where frames go: the socket, or rings_->toServer()
  std::unique_ptr<frame::StreamReader> reader_;
  std::shared_ptr<session::Session> session_;
  std::promise<void> ended_;
  uint64_t nextId_ = 1;
  std::vector<char> lastData_;
};

}  // namespace
}  // namespace tally
