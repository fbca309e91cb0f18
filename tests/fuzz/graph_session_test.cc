// CUDA graphs through tallyd's real request handlers, on the fake GPU (fake_gpu/fake_libcuda.cc:
// capture records nodes instead of doing the work, an "add" kernel adds 1 to the u32 its first
// parameter points at). Each test is one or two tenants — a Session over a socketpair, exactly
// as tallyd runs a connected client — driven call by call:
//  - capture, instantiate, launch: captured work does not run, each launch runs all of it;
//  - ids are the tenant's own and validated (another tenant's graph id is unknown here);
//  - calls that must not run on a capturing stream get the native error and invalidate it;
//  - a tenant that leaves mid-capture, with graphs and executable graphs, leaves none behind;
//  - under the priority scheduler, a high-priority and a best-effort tenant both capture;
//  - stream memory operations (cuStreamWriteValue32 ...) run on the tenant's own memory only,
//    on the same harness.
#include "common/frame/frame.h"
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
  server::gpu::ModuleStore modules{16u << 20};
  std::unique_ptr<server::scheduler::Policy> policy;
  ApiServices apiServices;
  server::api::Dispatcher dispatcher{apiServices};
  session::SessionServices services;
  std::atomic<bool> draining{false};
  std::atomic<uint64_t> nextTenant{1};

  explicit Server(const std::string& policyName) {
    spdlog::set_level(spdlog::level::warn);
    services.gpus = openGpus();
    std::string error;
    server::scheduler::SchedulerConfig config;
    config.policy = policyName;
    policy = server::scheduler::makePolicy(config, services.gpus, error);
    if (!policy) throw std::runtime_error("no policy: " + error);
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

Server& priorityServer() {
  static auto* s = new Server("priority");
  return *s;
}

// Graphs and executable graphs the fake driver holds (fake_gpu/fake_libcuda.cc, which the
// driver shim dlopened as libcuda.so.1).
size_t liveGraphs() {
  static auto* count = [] {
    openGpus();  // loads the driver
    void* fake = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void* symbol = fake != nullptr ? ::dlsym(fake, "tallyFakeLiveGraphs") : nullptr;
    if (symbol == nullptr) throw std::runtime_error("the fake driver has no tallyFakeLiveGraphs");
    return reinterpret_cast<size_t (*)()>(symbol);
  }();
  return count();
}

struct Answer {
  CUresult status = CUDA_ERROR_UNKNOWN;
  CUresult deferred = CUDA_SUCCESS;
  uint64_t value = 0;
  std::vector<uint8_t> nodeTypes;
  uint64_t nodeFunction = 0;
  std::vector<uint8_t> nodeParams;
};

// One tenant, driven call by call over a socketpair to a real Session.
class Tenant {
 public:
  explicit Tenant(Server& s, wire::PriorityClass priority = wire::PriorityClass::BEST_EFFORT) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) throw std::runtime_error("socketpair");
    fd_ = fds[0];
    reader_ = std::make_unique<frame::StreamReader>(fd_, 16u << 10);
    session::PeerInfo peer{"graph test socketpair", true, {}};
    session_ = std::make_shared<session::Session>(fds[1], peer, s.services, s.nextTenant++, s.draining);
    session_->start([this](session::Session&) { ended_.set_value(); });
    hello(priority);
  }
  ~Tenant() { leave(); }

  // The disconnect: the session releases everything the tenant owned.
  void leave() {
    if (fd_ < 0) return;
    ::close(fd_);
    fd_ = -1;
    ended_.get_future().wait();
    session_->join();
  }

  Answer call(const std::function<void(wire::Call::Builder)>& build, const std::string& bulk = {}) {
    uint64_t id = nextId_++;
    send(id, build, bulk);
    return await(id);
  }
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

  // One-way "add" launch on `stream`, adding to the u32 at `counter`.
  void launchAdd(uint64_t stream, uint64_t counter) {
    post([&](wire::Call::Builder c) {
      auto l = c.initLaunchKernel();
      l.setFunction(kFunction);
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
  // One-way stream memory operation (schema/stream.capnp StreamMemOps) of one write.
  void writeValue32(uint64_t stream, uint64_t address, uint32_t value) {
    post([&](wire::Call::Builder c) {
      auto m = c.initStreamMemOps();
      m.setStream(stream);
      auto op = m.initOps(1)[0];
      op.setOperation(CU_STREAM_MEM_OP_WRITE_VALUE_32);
      op.setAddress(address);
      op.setValue(value);
    });
  }
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
  void hello(wire::PriorityClass priority) {
    capnp::MallocMessageBuilder message;
    auto h = message.initRoot<wire::ClientMessage>().initHello();
    h.setProtocolVersion(wire::PROTOCOL_VERSION);
    h.setTenantName("graph-test");
    h.setPriority(priority);
    h.setClientHost("test");
    h.setCudaRuntimeVersion(13000);
    kj::Array<capnp::word> words = frame::flatten(message);
    ASSERT_TRUE(frame::writeFrame(fd_, words, {}).ok);
    frame::IncomingFrame incoming;
    ASSERT_TRUE(incoming.readMessage(*reader_, limits()).ok);
    auto welcome = incoming.message().getRoot<wire::ServerMessage>();
    ASSERT_TRUE(welcome.isWelcome());
    ASSERT_TRUE(welcome.getWelcome().getAccepted()) << welcome.getWelcome().getError().cStr();
  }

  static frame::FrameLimits limits() {
    frame::FrameLimits l;
    l.maxBulkBytes = 1u << 20;
    return l;
  }

  void send(uint64_t id, const std::function<void(wire::Call::Builder)>& build, const std::string& bulk) {
    capnp::MallocMessageBuilder message;
    auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
    call.setId(id);
    build(call);
    kj::Array<capnp::word> words = frame::flatten(message);
    iovec part{const_cast<char*>(bulk.data()), bulk.size()};
    ASSERT_TRUE(frame::writeFrame(fd_, words, std::span<const iovec>(&part, bulk.empty() ? 0 : 1)).ok);
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
    if (reply.isGraph()) {
      auto graph = reply.getGraph();
      if (graph.isNodeTypes()) {
        for (uint8_t t : graph.getNodeTypes()) a.nodeTypes.push_back(t);
      } else if (graph.isKernelNode()) {
        a.nodeFunction = graph.getKernelNode().getFunction();
        auto params = graph.getKernelNode().getParams();
        a.nodeParams.assign(params.begin(), params.end());
      }
    }
    return a;
  }

  int fd_ = -1;
  std::unique_ptr<frame::StreamReader> reader_;
  std::shared_ptr<session::Session> session_;
  std::promise<void> ended_;
  uint64_t nextId_ = 1;
  std::vector<char> lastData_;
};

// --- capture, instantiate, launch --------------------------------------------------------------

TEST(GraphSession, CapturedWorkRunsOnlyWhenTheGraphIsLaunched) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  Answer begun = t.beginCapture(kStream);
  ASSERT_EQ(begun.status, CUDA_SUCCESS);
  EXPECT_NE(begun.value, 0u);  // the driver's capture id
  for (int i = 0; i < 3; ++i) t.launchAdd(kStream, counter);
  EXPECT_EQ(t.read(counter), 0u);  // captured, not run (the legacy stream is free to use)
  ASSERT_EQ(t.endCapture(kStream, 100).status, CUDA_SUCCESS);
  Answer nodes = t.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(100); });
  EXPECT_EQ(nodes.status, CUDA_SUCCESS);
  EXPECT_EQ(nodes.nodeTypes, std::vector<uint8_t>(3, CU_GRAPH_NODE_TYPE_KERNEL));
  ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
  for (int i = 0; i < 10; ++i) t.launchGraph(200, kStream);
  EXPECT_EQ(t.read(counter), 30u);
  t.createStream(kOtherStream, true);
  t.launchGraph(200, kOtherStream);  // on a second stream
  EXPECT_EQ(t.read(counter), 33u);
  EXPECT_EQ(t.synchronize(kStream).status, CUDA_SUCCESS);  // not capturing any more
}

TEST(GraphSession, NodesAndKernelParametersByTheTenantsIds) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  t.launchAdd(kStream, counter);
  t.launchAdd(kStream, counter);
  ASSERT_EQ(t.endCapture(kStream, 100).status, CUDA_SUCCESS);
  Answer nodes = t.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(100); });
  ASSERT_EQ(nodes.status, CUDA_SUCCESS);
  EXPECT_EQ(nodes.nodeTypes, std::vector<uint8_t>(2, CU_GRAPH_NODE_TYPE_KERNEL));
  Answer params = t.call([](wire::Call::Builder c) {
    auto n = c.initGraphKernelNodeGetParams();
    n.setGraph(100);
    n.setNode(1);
  });
  ASSERT_EQ(params.status, CUDA_SUCCESS);
  EXPECT_EQ(params.nodeFunction, kFunction);  // the tenant's handle, not a driver address
  ASSERT_EQ(params.nodeParams.size(), kParamBytes);
  uint64_t pointer = 0;
  std::memcpy(&pointer, params.nodeParams.data(), sizeof(pointer));
  EXPECT_EQ(pointer, counter);

  // Node 1 of the executable graph now adds to the next word; the graph's own node is unchanged.
  ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
  uint64_t next = counter + 4;
  std::vector<uint8_t> moved(kParamBytes, 0);
  std::memcpy(moved.data(), &next, sizeof(next));
  Answer set = t.call([&](wire::Call::Builder c) {
    auto s = c.initGraphKernelNodeSetParams();
    s.setExec(200);
    s.initNode().setGraph(100);
    s.getNode().setNode(1);
    auto p = s.initParams();
    p.setFunction(kFunction);
    for (auto d : {p.initGrid(), p.initBlock()}) {
      d.setX(1);
      d.setY(1);
      d.setZ(1);
    }
    p.setParams(kj::arrayPtr(moved.data(), moved.size()));
  });
  ASSERT_EQ(set.status, CUDA_SUCCESS);
  t.launchGraph(200, kStream);
  EXPECT_EQ(t.read(counter), 1u);
  EXPECT_EQ(t.read(next), 1u);
}

TEST(GraphSession, ExplicitConstructionKernelAndDeviceCopyNodes) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(300); }).status, CUDA_SUCCESS);
  std::vector<uint8_t> params(kParamBytes, 0);
  std::memcpy(params.data(), &counter, sizeof(counter));
  Answer kernel = t.call([&](wire::Call::Builder c) {
    auto a = c.initGraphAddKernelNode();
    a.setGraph(300);
    auto p = a.initParams();
    p.setFunction(kFunction);
    for (auto d : {p.initGrid(), p.initBlock()}) {
      d.setX(1);
      d.setY(1);
      d.setZ(1);
    }
    p.setParams(kj::arrayPtr(params.data(), params.size()));
  });
  ASSERT_EQ(kernel.status, CUDA_SUCCESS);
  EXPECT_EQ(kernel.value, 1u);
  auto copyNode = [&](uint64_t dst, uint64_t src, uint64_t width) {
    return t.call([&](wire::Call::Builder c) {
      auto a = c.initGraphAddMemcpyNode();
      a.setGraph(300);
      a.initDependencies(1).set(0, 1);
      a.setDst(dst);
      a.setSrc(src);
      a.setWidth(width);
    });
  };
  Answer copy = copyNode(counter + 8, counter, 4);
  ASSERT_EQ(copy.status, CUDA_SUCCESS);
  EXPECT_EQ(copy.value, 2u);
  EXPECT_EQ(copyNode(counter + 8, counter, 64).status, CUDA_ERROR_INVALID_VALUE);  // past the allocation
  EXPECT_EQ(copyNode(counter, 0x1000, 4).status, CUDA_ERROR_INVALID_VALUE);        // not the tenant's memory
  Answer edge = t.call([](wire::Call::Builder c) {
    auto a = c.initGraphAddDependencies();
    a.setGraph(300);
    a.initFrom(1).set(0, 1);
    a.initTo(1).set(0, 9);  // no node 9
  });
  EXPECT_EQ(edge.status, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(t.instantiate(300, 301).status, CUDA_SUCCESS);
  t.launchGraph(301, kStream);
  t.launchGraph(301, kStream);
  EXPECT_EQ(t.read(counter), 2u);
  EXPECT_EQ(t.read(counter + 8), 2u);  // copied after the kernel, each time
}

// --- ids ------------------------------------------------------------------------------------------

TEST(GraphSession, IdsAreTheTenantsOwnAndValidated) {
  Tenant a(server());
  a.prepare();
  ASSERT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(500); }).status, CUDA_SUCCESS);
  ASSERT_EQ(a.instantiate(500, 501).status, CUDA_SUCCESS);
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(500); }).status,
            CUDA_ERROR_INVALID_VALUE);  // in use
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(0); }).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(a.instantiate(999, 502).status, CUDA_ERROR_INVALID_VALUE);  // no graph 999
  EXPECT_EQ(a.instantiate(500, 501).status, CUDA_ERROR_INVALID_VALUE);  // exec id in use

  Tenant b(server());
  b.prepare();
  // Tenant a's ids name nothing of tenant b's.
  EXPECT_EQ(b.instantiate(500, 601).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphDestroy().setGraph(500); }).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphExecDestroy().setExec(501); }).status,
            CUDA_ERROR_INVALID_VALUE);
  Answer launch = b.call([](wire::Call::Builder c) {
    auto l = c.initGraphLaunch();
    l.setExec(501);
    l.setStream(kStream);
  });
  EXPECT_EQ(launch.status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(500); }).status, CUDA_ERROR_INVALID_VALUE);
  // Its own ids may be the same numbers.
  EXPECT_EQ(b.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(500); }).status, CUDA_SUCCESS);

  // Kernel nodes name the tenant's own functions only.
  Answer foreign = b.call([](wire::Call::Builder c) {
    auto k = c.initGraphAddKernelNode();
    k.setGraph(500);
    k.initParams().setFunction(0x49999);
  });
  EXPECT_EQ(foreign.status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphDestroy().setGraph(500); }).status, CUDA_SUCCESS);
  EXPECT_EQ(a.call([](wire::Call::Builder c) { c.initGraphExecDestroy().setExec(501); }).status, CUDA_SUCCESS);
}

TEST(GraphSession, CaptureLifecycleErrorsAreTheNativeOnes) {
  Tenant t(server());
  t.prepare();
  EXPECT_EQ(t.beginCapture(kLegacy).status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.beginCapture(0x12345).status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(t.beginCapture(kStream, 7).status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_ILLEGAL_STATE);  // not capturing
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(t.beginCapture(kStream).status, CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(t.endCapture(kStream, 0).status, CUDA_ERROR_INVALID_VALUE);  // no graph id: the capture ends anyway
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_ILLEGAL_STATE);
}

// --- calls that must not run on a capturing stream ---------------------------------------------

TEST(GraphSession, SyncOfACapturingStreamIsRefusedAndInvalidates) {
  Tenant t(server());
  t.prepare();
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(t.synchronize(kStream).status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.call([](wire::Call::Builder c) { c.initStreamQuery().setStream(kStream); }).status,
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(t.instantiate(100, 200).status, CUDA_ERROR_INVALID_VALUE);  // no graph came of it
}

TEST(GraphSession, CopiesThroughStagingAndHostCallbacksAreNotCaptured) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  std::string bytes(16, 'x');
  Answer in = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemcpy();
    m.setKind(wire::CopyKind::HOST_TO_DEVICE);
    m.setStream(kStream);
    m.setDst(counter);
    m.setWidth(bytes.size());
  }, bytes);
  EXPECT_EQ(in.status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);  // and its bulk consumed: still framed
  Answer out = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemcpy();
    m.setKind(wire::CopyKind::DEVICE_TO_HOST);
    m.setStream(kStream);
    m.setSrc(counter);
    m.setWidth(4);
    m.setToken(5);
  });
  EXPECT_EQ(out.status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  Answer callback = t.call([](wire::Call::Builder c) {
    auto f = c.initHostFunc();
    f.setStream(kStream);
    f.setCallback(1);
  });
  EXPECT_EQ(callback.status, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.endCapture(kStream, 100).status, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(t.read(counter), 0u);  // the refused copy never ran
}

TEST(GraphSession, LegacyStreamWhileABlockingStreamCapturesIsImplicit) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  t.createStream(kBlockingStream, false);
  ASSERT_EQ(t.beginCapture(kBlockingStream).status, CUDA_SUCCESS);
  Answer set = t.call([&](wire::Call::Builder c) {
    auto m = c.initMemset();
    m.setStream(kLegacy);
    m.setDst(counter);
    m.setWidth(4);
    m.setValue(1);
  });
  EXPECT_EQ(set.status, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  EXPECT_EQ(t.endCapture(kBlockingStream, 100).status, CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(t.read(counter), 0u);  // the memset did not run
}

TEST(GraphSession, EventsForkAndJoinACaptureAndCannotBeWaitedFor) {
  Tenant t(server());
  uint64_t counter = t.prepare();
  t.createStream(kOtherStream, true);
  for (uint64_t e : {kEvent, kOtherEvent}) t.post([&](wire::Call::Builder c) { c.initEventCreate().setEvent(e); });
  auto record = [&](uint64_t event, uint64_t stream) {
    t.post([&](wire::Call::Builder c) {
      auto r = c.initEventRecord();
      r.setEvent(event);
      r.setStream(stream);
    });
  };
  auto wait = [&](uint64_t stream, uint64_t event) {
    t.post([&](wire::Call::Builder c) {
      auto w = c.initStreamWaitEvent();
      w.setStream(stream);
      w.setEvent(event);
    });
  };
  ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
  record(kEvent, kStream);
  Answer sync = t.call([](wire::Call::Builder c) { c.initEventSynchronize().setEvent(kEvent); });
  EXPECT_EQ(sync.status, CUDA_ERROR_CAPTURED_EVENT);
  wait(kOtherStream, kEvent);  // fork: the other stream joins the capture
  t.launchAdd(kOtherStream, counter);
  t.launchAdd(kStream, counter);
  record(kOtherEvent, kOtherStream);
  wait(kStream, kOtherEvent);  // join
  EXPECT_EQ(t.read(counter), 0u);
  Answer ended = t.endCapture(kStream, 100);
  ASSERT_EQ(ended.status, CUDA_SUCCESS);
  EXPECT_EQ(ended.deferred, CUDA_SUCCESS);
  ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
  t.launchGraph(200, kStream);
  EXPECT_EQ(t.read(counter), 2u);
  EXPECT_EQ(t.synchronize(kOtherStream).status, CUDA_SUCCESS);  // out of the capture again
}

// --- the end of a tenant --------------------------------------------------------------------------

TEST(GraphSession, ATenantLeavingMidCaptureLeavesNoGraphBehind) {
  size_t before = liveGraphs();
  {
    Tenant t(server());
    uint64_t counter = t.prepare();
    ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);
    t.launchAdd(kStream, counter);
    ASSERT_EQ(t.endCapture(kStream, 100).status, CUDA_SUCCESS);
    ASSERT_EQ(t.instantiate(100, 200).status, CUDA_SUCCESS);
    t.launchGraph(200, kStream);
    ASSERT_EQ(t.call([](wire::Call::Builder c) { c.initGraphCreate().setGraph(300); }).status, CUDA_SUCCESS);
    ASSERT_EQ(t.beginCapture(kStream).status, CUDA_SUCCESS);  // still open when it leaves
    t.launchAdd(kStream, counter);
    EXPECT_EQ(liveGraphs(), before + 4);
    t.leave();
  }
  EXPECT_EQ(liveGraphs(), before);
}

// --- the scheduler ----------------------------------------------------------------------------------

TEST(GraphSession, HighPriorityAndBestEffortTenantsCaptureUnderThePriorityPolicy) {
  Server& s = priorityServer();
  Tenant hp(s, wire::PriorityClass::HIGH_PRIORITY);
  Tenant be(s, wire::PriorityClass::BEST_EFFORT);
  for (Tenant* t : {&hp, &be}) {
    uint64_t counter = t->prepare();
    ASSERT_EQ(t->beginCapture(kStream).status, CUDA_SUCCESS);
    t->launchAdd(kStream, counter);
    t->launchAdd(kStream, counter);
    // Other stream work while capturing: no scheduler mark may be captured with it.
    t->post([&](wire::Call::Builder c) {
      auto m = c.initMemset();
      m.setStream(kStream);
      m.setDst(counter + 8);
      m.setElementSize(4);
      m.setWidth(1);
      m.setValue(7);
    });
    Answer ended = t->endCapture(kStream, 100);
    ASSERT_EQ(ended.status, CUDA_SUCCESS);
    EXPECT_EQ(ended.deferred, CUDA_SUCCESS);
    Answer nodes = t->call([](wire::Call::Builder c) { c.initGraphGetNodes().setGraph(100); });
    EXPECT_EQ(nodes.nodeTypes.size(), 3u);  // two kernels and the memset, nothing of the scheduler's
    ASSERT_EQ(t->instantiate(100, 200).status, CUDA_SUCCESS);
    for (int i = 0; i < 5; ++i) t->launchGraph(200, kStream);
    EXPECT_EQ(t->synchronize(kStream).status, CUDA_SUCCESS);
    EXPECT_EQ(t->read(counter), 10u);
    EXPECT_EQ(t->read(counter + 8), 7u);
  }
}

// --- stream memory operations ----------------------------------------------------------------------

TEST(StreamMemOpsSession, AWriteToTheTenantsOwnMemoryRuns) {
  Tenant t(server());
  uint64_t word = t.prepare();
  t.writeValue32(kStream, word, 0x1234);
  Answer synced = t.synchronize(kStream);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_SUCCESS);
  EXPECT_EQ(t.read(word), 0x1234u);
}

TEST(StreamMemOpsSession, AWriteToAnotherTenantsMemoryIsRefused) {
  Tenant owner(server());
  uint64_t theirs = owner.prepare();
  Tenant intruder(server());
  intruder.prepare();
  intruder.writeValue32(kLegacy, theirs, 0xdead);
  Answer synced = intruder.synchronize(kLegacy);
  EXPECT_EQ(synced.status, CUDA_SUCCESS);
  EXPECT_EQ(synced.deferred, CUDA_ERROR_INVALID_VALUE);  // the one-way call's refusal, at the next sync
  EXPECT_EQ(owner.read(theirs), 0u);                     // never executed
  intruder.writeValue32(kLegacy, theirs + 2, 1);         // misaligned, even if it were the tenant's
  EXPECT_EQ(intruder.synchronize(kLegacy).deferred, CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace tally
