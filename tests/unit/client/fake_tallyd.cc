#include "fake_tallyd.h"

#include <cstdlib>

#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <cuda.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>

namespace tally::testing {

namespace {

std::vector<char> framed(capnp::MessageBuilder& message, size_t bulkBytes = 0, char bulkByte = 0) {
  auto words = capnp::messageToFlatArray(message);
  std::vector<char> out;
  frame::appendFrame(out, words, bulkBytes);
  out.insert(out.end(), bulkBytes, bulkByte);
  return out;
}

}  // namespace

std::vector<char> FakeTallyd::welcome(bool sharedRing) {
  capnp::MallocMessageBuilder message;
  auto w = message.initRoot<wire::ServerMessage>().initWelcome();
  w.setAccepted(true);
  w.setProtocolVersion(wire::PROTOCOL_VERSION);
  w.setTenantId(1);
  w.setDriverVersion(13000);
  w.setSharedHostMemory(sharedHostMemory_.load());
  w.setSharedRing(sharedRing);
  auto devices = w.initDevices(deviceCount_.load());
  for (unsigned i = 0; i < devices.size(); ++i) {
    auto device = devices[i];
    device.setOrdinal(i);
    device.setName(i == 0 ? "fake GPU" : "fake GPU " + std::to_string(i));
    device.setMajor(9);
    device.setTotalMem((1u << 30) * (i + 1));
    device.setStreamPriorityGreatest(-5);
    auto attributes = device.initAttributes(static_cast<unsigned>(std::size(kFakeLaunchLimits)));
    for (unsigned a = 0; a < attributes.size(); ++a) attributes.set(a, kFakeLaunchLimits[a]);
    std::string uuid(16, static_cast<char>(0x11 * (i + 1)));
    device.setUuid(kj::arrayPtr(reinterpret_cast<const kj::byte*>(uuid.data()), uuid.size()));
    // Every pair of distinct devices is linked: rank 0, access, atomics, arrays, not partial.
    auto peers = device.initP2pAttributes(devices.size());
    for (unsigned j = 0; j < devices.size(); ++j) {
      auto row = peers.init(j, CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED + 1);
      for (int a : {CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
                    CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED}) {
        row.set(static_cast<unsigned>(a), i != j ? 1 : 0);
      }
    }
  }
  return framed(message);
}

std::vector<FakeTallyd::HostMapping> FakeTallyd::hostMappings() {
  std::lock_guard lock(stateMutex_);
  return hostMappings_;
}

std::pair<bool, std::vector<std::string>> FakeTallyd::helloDevices() {
  std::lock_guard lock(stateMutex_);
  return {helloRestricts_, helloEntries_};
}

uint64_t FakeTallyd::lastMemsetStream() {
  std::lock_guard lock(stateMutex_);
  return lastMemsetStream_;
}

uint32_t FakeTallyd::lastAllocDevice() {
  std::lock_guard lock(stateMutex_);
  return lastAllocDevice_;
}

uint64_t FakeTallyd::lastLaunchFunction() {
  std::lock_guard lock(stateMutex_);
  return lastLaunchFunction_;
}

std::vector<uint32_t> FakeTallyd::lastLaunchAttributeIds() {
  std::lock_guard lock(stateMutex_);
  return lastLaunchAttributeIds_;
}

std::vector<FakeTallyd::HostNodeWords> FakeTallyd::lastGraphLaunchHostNodes() {
  std::lock_guard lock(stateMutex_);
  return lastGraphLaunchHostNodes_;
}

uint64_t FakeTallyd::functionIdOf(const std::string& name) {
  std::lock_guard lock(stateMutex_);
  auto it = functionIds_.find(name);
  return it != functionIds_.end() ? it->second : 0;
}

void FakeTallyd::hostMemoryCall(wire::Call::Reader call, wire::Reply::Builder reply) {
  std::lock_guard lock(stateMutex_);
  if (call.isHostRegister()) {
    int fd = reader_->takeFd();
    auto args = call.getHostRegister();
    void* local = fd < 0 ? MAP_FAILED : ::mmap(nullptr, args.getSize(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) ::close(fd);
    if (local == MAP_FAILED) {
      reply.setStatus(CUDA_ERROR_INVALID_VALUE);
      return;
    }
    hostMappings_.push_back({args.getClientAddress(), args.getSize(), static_cast<char*>(local)});
    reply.setValue(sameHostAddress_ ? args.getClientAddress()
                                    : kFakeHostDeviceBase + (args.getClientAddress() & 0xffffffffull));
    return;
  }
  if (call.isHostUnregister()) {
    auto it = std::find_if(hostMappings_.begin(), hostMappings_.end(), [&](const HostMapping& m) {
      return m.clientAddress == call.getHostUnregister().getClientAddress();
    });
    if (it == hostMappings_.end()) {
      reply.setStatus(CUDA_ERROR_INVALID_VALUE);
      return;
    }
    ::munmap(it->local, it->size);
    hostMappings_.erase(it);
    return;
  }
  // A device-to-host copy into shared memory: the "DMA" writes 0xAB into the mapping.
  auto copy = call.getMemcpy();
  for (const HostMapping& m : hostMappings_) {
    uint64_t bytes = copy.getWidth() * std::max<uint64_t>(copy.getHeight(), 1);
    if (copy.getDst() >= m.clientAddress && copy.getDst() + bytes <= m.clientAddress + m.size) {
      std::memset(m.local + (copy.getDst() - m.clientAddress), 0xAB, bytes);
    }
  }
}

class FrameView {
 public:
  frame::IncomingFrame frame;
  std::vector<char> bulk;
};

FakeTallyd::FakeTallyd() {
  path_ = "/tmp/tally-fake-" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + ".sock";
  ::unlink(path_.c_str());
  listenFd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
  ::bind(listenFd_, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  ::listen(listenFd_, 1);
  thread_ = std::thread([this] { serve(); });
}

FakeTallyd::~FakeTallyd() {
  ::shutdown(listenFd_, SHUT_RDWR);
  if (clientFd_ >= 0) ::shutdown(clientFd_, SHUT_RDWR);
  thread_.join();
  ::close(listenFd_);
  if (clientFd_ >= 0) ::close(clientFd_);
  ::unlink(path_.c_str());
}

std::vector<uint64_t> FakeTallyd::hostFuncCallbacks() {
  std::lock_guard lock(stateMutex_);
  return hostFuncCallbacks_;
}

uint64_t FakeTallyd::callsOf(wire::Call::Which kind) {
  std::lock_guard lock(stateMutex_);
  auto it = callsByKind_.find(kind);
  return it != callsByKind_.end() ? it->second : 0;
}

std::vector<FakeTallyd::MemOp> FakeTallyd::lastStreamMemOps() {
  std::lock_guard lock(stateMutex_);
  return lastStreamMemOps_;
}

FakeTallyd::LinkCreated FakeTallyd::lastLinkCreate() {
  std::lock_guard lock(stateMutex_);
  return lastLinkCreate_;
}

namespace {

FakeTallyd::LinkCreated linkCreated(wire::LinkCreate::Reader create) {
  FakeTallyd::LinkCreated out;
  for (auto o : create.getOptions()) out.options.emplace_back(o.getOption(), o.getValue());
  out.infoLogBytes = create.getInfoLogBytes();
  out.errorLogBytes = create.getErrorLogBytes();
  out.wallTime = create.getWallTime();
  return out;
}

// As the driver fills the log buffers: nothing at cuLinkCreate, the error log when an input
// fails (one named kFakeBrokenInput), both logs at cuLinkComplete.
void answerLink(wire::Call::Reader call, wire::Reply::Builder reply) {
  auto link = reply.initLink();
  link.setWallTimeMs(1.5f);
  if (call.isLinkAddData() && call.getLinkAddData().getName() == kFakeBrokenInput) {
    reply.setStatus(CUDA_ERROR_INVALID_PTX);
    link.setErrorLog(kFakeErrorLog);
  }
  if (call.isLinkComplete()) {
    link.setInfoLog(kFakeInfoLog);
    link.setErrorLog(kFakeErrorLog);
    link.setImage(kj::arrayPtr(reinterpret_cast<const kj::byte*>(kFakeLinkedImage), sizeof kFakeLinkedImage));
  }
}

bool isFakeKernel(kj::StringPtr name) {
  return std::any_of(std::begin(kFakeKernelNames), std::end(kFakeKernelNames),
                     [&](const char* kernel) { return name == kernel; });
}

// Every module holds kFakeKernelNames and kFakeGlobalName, whatever its image.
void answerModule(wire::Call::Reader call, wire::Reply::Builder reply) {
  if (call.isModuleFunctionNames()) {
    auto names = reply.initFunctionNames(static_cast<unsigned>(std::size(kFakeKernelNames)));
    for (unsigned i = 0; i < names.size(); ++i) names.set(i, kFakeKernelNames[i]);
  } else if (call.isModuleGetFunction()) {
    if (!isFakeKernel(call.getModuleGetFunction().getName())) {
      reply.setStatus(CUDA_ERROR_NOT_FOUND);
      return;
    }
    auto info = reply.initFunction();
    auto param = info.initParams(1)[0];
    param.setOffset(0);
    param.setSize(8);
    auto attributes = info.initAttributes(CU_FUNC_ATTRIBUTE_MAX);
    attributes.set(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, kFakeMaxThreadsPerBlock);
    attributes.set(CU_FUNC_ATTRIBUTE_NUM_REGS, kFakeNumRegs);
    attributes.set(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 48 << 10);
  } else if (call.isModuleGetGlobal()) {
    if (call.getModuleGetGlobal().getName() != kFakeGlobalName) {
      reply.setStatus(CUDA_ERROR_NOT_FOUND);
      return;
    }
    auto global = reply.initGlobal();
    global.setPtr(kFakeGlobalAddress);
    global.setSize(kFakeGlobalBytes);
  }
}

}  // namespace

void FakeTallyd::record(wire::Call::Reader call) {
  std::lock_guard lock(stateMutex_);
  ++callsByKind_[call.which()];
  if (call.isMemAlloc()) lastAllocDevice_ = call.getMemAlloc().getDevice();
  if (call.isMemset()) lastMemsetStream_ = call.getMemset().getStream();
  if (call.isHostFunc()) hostFuncCallbacks_.push_back(call.getHostFunc().getCallback());
  if (call.isLinkCreate()) lastLinkCreate_ = linkCreated(call.getLinkCreate());
  if (call.isLaunchKernel()) {
    lastLaunchFunction_ = call.getLaunchKernel().getFunction();
    lastLaunchAttributeIds_.clear();
    for (auto a : call.getLaunchKernel().getAttributes()) lastLaunchAttributeIds_.push_back(a.getId());
  }
  if (call.isGraphLaunch()) {
    lastGraphLaunchHostNodes_.clear();
    for (auto h : call.getGraphLaunch().getHostNodes()) {
      lastGraphLaunchHostNodes_.push_back({h.getNode(), h.getReachedWord(), h.getDoneWord(), h.getSequence()});
    }
  }
  if (call.isModuleGetFunction()) {
    functionIds_[call.getModuleGetFunction().getName().cStr()] = call.getModuleGetFunction().getFunction();
  }
  if (call.isStreamMemOps()) {
    lastStreamMemOps_.clear();
    for (auto op : call.getStreamMemOps().getOps()) {
      lastStreamMemOps_.push_back({op.getOperation(), op.getAddress(), op.getValue(), op.getFlags()});
    }
  }
}

void FakeTallyd::write(const std::vector<char>& bytes) {
  std::lock_guard lock(writeMutex_);
  iovec part{const_cast<char*>(bytes.data()), bytes.size()};
  frame::writeAll(frame::Channel{clientFd_, rings_ ? &rings_->toClient() : nullptr}, std::span<const iovec>(&part, 1));
}

void FakeTallyd::sendHostFuncReady(uint64_t stream, uint64_t callback) {
  capnp::MallocMessageBuilder message;
  auto ready = message.initRoot<wire::ServerMessage>().initHostFuncReady();
  ready.setStream(stream);
  ready.setSequence(1);
  ready.setCallback(callback);
  write(framed(message));
}

void FakeTallyd::serve() {
  clientFd_ = ::accept(listenFd_, nullptr, nullptr);
  if (clientFd_ < 0) return;
  frame::StreamReader reader(clientFd_);
  reader_ = &reader;
  frame::FrameLimits limits;
  FrameView view;
  for (;;) {
    if (!view.frame.readMessage(reader, limits).ok) return;
    view.bulk.resize(view.frame.bulkBytes());
    if (!reader.read(view.bulk.data(), view.bulk.size()).ok) return;
    if (!handleFrame(view)) return;
  }
}

bool FakeTallyd::handleFrame(FrameView& view) {
  auto root = view.frame.message().getRoot<wire::ClientMessage>();
  if (root.isHello()) {
    {
      std::lock_guard lock(stateMutex_);
      helloRestricts_ = root.getHello().getRestrictDevices();
      for (auto e : root.getHello().getVisibleDevices()) helloEntries_.emplace_back(e.cStr());
    }
    // As tallyd over a Unix socket (shared host memory): the client's rings carry what follows.
    std::unique_ptr<frame::SharedRings> rings;
    if (uint32_t bytes = root.getHello().getSharedRingBytes(); bytes != 0) {
      std::string why;
      int fd = reader_->takeFd();
      if (sharedHostMemory_) {
        rings = frame::SharedRings::adopt(fd, bytes, clientFd_, why);
      } else if (fd >= 0) {
        ::close(fd);
      }
    }
    write(welcome(rings != nullptr));
    if (rings) {
      ringsOffered_ = true;
      reader_->useRing(&rings->toServer());
      std::lock_guard lock(writeMutex_);
      rings_ = std::move(rings);
    }
    return true;
  }
  if (!view.bulk.empty() && std::all_of(view.bulk.begin(), view.bulk.end(), [](char c) { return c == 0; })) {
    ++zeroBulkFrames_;
  }
  for (auto call : root.getCalls()) {
    record(call);
    ++calls_;
    capnp::MallocMessageBuilder message;
    auto reply = message.initRoot<wire::ServerMessage>().initReply();
    reply.setId(call.getId());
    bool sharedCopy = call.isMemcpy() && call.getMemcpy().getHostShared();
    if (call.isHostRegister() || call.isHostUnregister() || sharedCopy) hostMemoryCall(call, reply);
    if (call.getId() == 0) continue;
    size_t bulk = 0;
    if (call.isMemAlloc() || (call.isMemPool() && call.getMemPool().isAllocAsync())) {
      reply.setValue(nextAddress_.fetch_add(1u << 20));
    }
    if (call.isGraphAddNode() || call.isGraphAddKernelNode() || call.isGraphAddMemcpyNode()) {
      reply.setValue(++nextGraphNode_);  // the node's id in its graph (never reused here)
    }
    if (call.isGraphExecUpdate()) reply.initGraph().initExecUpdate();  // success, no error node
    if (call.isLinkCreate() || call.isLinkAddData() || call.isLinkComplete()) answerLink(call, reply);
    if (call.isModuleFunctionNames() || call.isModuleGetFunction() || call.isModuleGetGlobal()) answerModule(call, reply);
    if (call.isLibrary()) {  // every answer differs: 8 bytes counting the library round trips
      uint64_t n = ++libraryRoundTrips_;
      reply.setLibraryOut(kj::arrayPtr(reinterpret_cast<const kj::byte*>(&n), sizeof n));
    }
    if (call.isTextureCreate() || call.isSurfaceCreate()) {
      static std::atomic<uint64_t> nextObject{0x100};
      reply.setValue(++nextObject);  // the driver's object value
    }
    if (call.isArrayCopy() && call.getArrayCopy().getDst().isHost()) {
      auto copy = call.getArrayCopy();
      reply.setDataToken(copy.getToken());
      bulk = copy.getWidthInBytes() * std::max<uint64_t>(copy.getHeight(), 1) * std::max<uint64_t>(copy.getDepth(), 1);
    }
    if (call.isMemcpy() && call.getMemcpy().getKind() == wire::CopyKind::DEVICE_TO_HOST && !sharedCopy) {
      reply.setDataToken(call.getMemcpy().getToken());
      bulk = call.getMemcpy().getWidth() * std::max<uint64_t>(call.getMemcpy().getHeight(), 1);
    }
    if (uint32_t slot = call.getCompletionSlot(); slot != 0 && rings_ && slot <= frame::SharedRings::kCompletionSlots) {
      rings_->completionWord(slot - 1).store(static_cast<uint32_t>(call.getId()), std::memory_order_release);
      std::this_thread::sleep_for(wordReplyDelay_.load());
    }
    write(framed(message, bulk, static_cast<char>(0xAB)));
  }
  return true;
}

FakeTallyd& processFakeTallyd() {
  static FakeTallyd* server = [] {
    auto* s = new FakeTallyd();  // leaked: the client may still talk to it during exit
    ::setenv("TALLY_SERVER", s->endpoint().c_str(), 1);
    return s;
  }();
  return *server;
}

}  // namespace tally::testing
