#include "tests/fuzz/hostile_client.h"

#include "common/hash/content_hash.h"

#include <capnp/message.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace tally::fuzz {
namespace {

constexpr size_t kMaxCallsPerFrame = 4;
constexpr size_t kMaxFrames = 24;
constexpr size_t kReaderBuffer = 16u << 10;      // replies are small; bulk bypasses the buffer
constexpr uint64_t kMaxBulk = 64u << 10;       // what a frame carries at most here
constexpr uint64_t kMaxMemfd = 1u << 20;
constexpr uint64_t kFirstUserStream = 1u << 16;  // server/session/tenant.h: below are legacy streams
constexpr uint64_t kEventBase = 0x5e000;
constexpr uint64_t kModuleBase = 0x30000;
constexpr uint64_t kFunctionBase = 0x40000;
constexpr uint64_t kHostBase = 0x6f0000000000;   // client addresses of shared host memory
constexpr auto kReplyTimeout = std::chrono::seconds(10);

// Values at the edges of arithmetic: products and sums of these wrap 64 bits.
constexpr uint64_t kEdgeValues[] = {
    0, 1, 2, 3, 4, 7, 8, 511, 512, 4096, 65535, 65536, 1ull << 31, 1ull << 32, (1ull << 32) + 1, 1ull << 62,
    (1ull << 63) - 1, 1ull << 63, (1ull << 63) + 1, std::numeric_limits<uint64_t>::max() / 2 + 1,
    std::numeric_limits<uint64_t>::max() / 4 + 1, std::numeric_limits<uint64_t>::max() - 1,
    std::numeric_limits<uint64_t>::max()};

// Kernel names: the fake driver derives each one's parameters from the name's length.
const char* const kNames[] = {"k", "k1", "kern", "kern4", "kernel", "missing_kernel", "g", "global_a", "var7",
                              "a_long_global_name_1234567"};

uint64_t checkedProduct(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? std::numeric_limits<uint64_t>::max() : out;
}

}  // namespace

HostileClient::HostileClient(int fd, InputBytes& in) : fd_(fd), in_(in), reader_(fd, kReaderBuffer) {}

HostileClient::~HostileClient() {
  for (int fd : memfds_) ::close(fd);
}

void HostileClient::run() {
  if (!sendHello() || !awaitReplies()) return;
  for (size_t frames = 0; frames < kMaxFrames && !in_.empty(); ++frames) {
    if (!sendCallFrame() || !awaitReplies()) return;
  }
}

// Mostly a valid Hello (a session that gets nowhere finds nothing); sometimes a wrong
// version, a huge name or a token.
bool HostileClient::sendHello() {
  capnp::MallocMessageBuilder message;
  auto hello = message.initRoot<wire::ClientMessage>().initHello();
  uint8_t mode = in_.u8();
  hello.setProtocolVersion(mode == 0xff ? in_.u32() : wire::PROTOCOL_VERSION);
  hello.setTenantName(mode == 0xfe ? std::string(4096, 'n') : "fuzz");
  hello.setPriority(mode & 1 ? wire::PriorityClass::HIGH_PRIORITY : wire::PriorityClass::BEST_EFFORT);
  if (mode == 0xfd) {
    const kj::byte token[] = {1, 2, 3};
    hello.setAuthToken(kj::arrayPtr(token, sizeof(token)));
  }
  hello.setClientHost("fuzzhost");
  hello.setClientPid(in_.u16());
  hello.setCudaRuntimeVersion(13000);
  kj::Array<capnp::word> words = frame::flatten(message);
  if (!frame::writeFrame(fd_, words, {}).ok) return false;
  pending_[0] = {};  // the Welcome
  return true;
}

bool HostileClient::sendCallFrame() {
  Frame frame;
  capnp::MallocMessageBuilder message;
  size_t count = 1 + in_.choose(kMaxCallsPerFrame);
  auto calls = message.initRoot<wire::ClientMessage>().initCalls(static_cast<unsigned>(count));
  for (auto call : calls) fillCall(call, frame);
  // A descriptor no call asks for, now and then: the server must not hoard them.
  if (frame.fd < 0 && in_.choose(16) == 0) frame.fd = ::dup(makeMemfd(4096, true));
  kj::Array<capnp::word> words = frame::flatten(message);
  iovec bulk{frame.bulk.data(), frame.bulk.size()};
  std::span<const iovec> parts(&bulk, frame.bulk.empty() ? 0 : 1);
  bool sent = frame::writeFrame(fd_, words, parts, frame.fd).ok;
  if (frame.fd >= 0) ::close(frame.fd);
  if (in_.choose(32) == 0) shrinkSharedMemory();
  return sent;
}

// Reads server messages until every call of the frame with an id has its reply (or the
// Welcome came), learning from replies; false once the server dropped us.
bool HostileClient::awaitReplies() {
  frame::FrameLimits limits;
  limits.maxBulkBytes = std::numeric_limits<uint32_t>::max();
  reader_.setDeadline(frame::StreamReader::Clock::now() + kReplyTimeout);
  while (!pending_.empty()) {
    frame::IncomingFrame incoming;
    if (!incoming.readMessage(reader_, limits).ok) return false;
    auto message = incoming.message().getRoot<wire::ServerMessage>();
    if (!reader_.skip(incoming.bulkBytes()).ok) return false;
    if (message.isWelcome()) {
      pending_.erase(0);
      if (!message.getWelcome().getAccepted()) return false;
    } else if (message.isReply()) {
      auto reply = message.getReply();
      auto it = pending_.find(reply.getId());
      if (it == pending_.end()) continue;
      if (it->second && reply.getStatus() == 0) it->second(reply);
      pending_.erase(it);
    }
  }
  return true;
}

void HostileClient::expectReply(uint64_t id, ReplyHandler handler) {
  if (id != 0) pending_[id] = std::move(handler);
}

void HostileClient::fillCall(wire::Call::Builder call, Frame& frame) {
  // One call in eight is one-way (id 0): its errors come back deferred.
  currentId_ = in_.choose(8) == 0 ? 0 : nextId_++;
  call.setId(currentId_);
  const auto op = static_cast<Op>(in_.choose(static_cast<size_t>(Op::kCount)));
  switch (op) {
    case Op::kMemAlloc: return memAlloc(call);
    case Op::kMemFree: call.initMemFree().setPtr(pointer()); break;
    case Op::kMemcpy: return memcpy(call, frame);
    case Op::kMemset: return memset(call);
    case Op::kMemGetInfo: call.initMemGetInfo().setDevice(device()); break;
    case Op::kHostRegister: return hostRegister(call, frame);
    case Op::kHostUnregister: call.initHostUnregister().setClientAddress(hostAddress()); break;
    case Op::kHostFunc: return hostFunc(call);
    case Op::kModuleLoad: return moduleLoad(call, frame);
    case Op::kModuleUnload: call.initModuleUnload().setModule(moduleHandle()); break;
    case Op::kModuleGetFunction: return moduleGetFunction(call);
    case Op::kModuleGetGlobal: return moduleGetGlobal(call);
    case Op::kFuncSetAttribute: {
      auto a = call.initFuncSetAttribute();
      a.setFunction(functionHandle());
      // Enum ids stay within the enum's value range (0..15): larger ones are undefined behaviour
      // in the handlers' casts, reported once; here they would end every run at once.
      a.setAttribute(static_cast<int32_t>(in_.u8() % 16));
      a.setValue(static_cast<int32_t>(in_.u32()));
      break;
    }
    case Op::kOccupancy: return occupancy(call);
    case Op::kLaunchKernel: return launchKernel(call);
    case Op::kSetLimit: limit(call.initSetLimit()); break;
    case Op::kGetLimit: limit(call.initGetLimit()); break;
    default: streamCall(op, call); break;
  }
  expectReply(currentId_);
}

// Streams, events, host functions and device syncs: handles, mostly of the tenant's own.
void HostileClient::streamCall(Op op, wire::Call::Builder call) {
  switch (op) {
    case Op::kStreamCreate: {
      auto s = call.initStreamCreate();
      s.setDevice(device());
      s.setStream(streamHandle());
      s.setNonBlocking(in_.flag());
      s.setPriority(static_cast<int32_t>(in_.u8()) - 128);
      break;
    }
    case Op::kStreamDestroy: call.initStreamDestroy().setStream(streamHandle()); break;
    case Op::kStreamSynchronize: call.initStreamSynchronize().setStream(streamHandle()); break;
    case Op::kStreamQuery: call.initStreamQuery().setStream(streamHandle()); break;
    case Op::kStreamWaitEvent: {
      auto w = call.initStreamWaitEvent();
      w.setStream(streamHandle());
      w.setEvent(eventHandle());
      break;
    }
    case Op::kEventCreate: {
      auto e = call.initEventCreate();
      e.setDevice(device());
      e.setEvent(eventHandle());
      e.setFlags(in_.u8());
      break;
    }
    case Op::kEventDestroy: call.initEventDestroy().setEvent(eventHandle()); break;
    case Op::kEventRecord: {
      auto e = call.initEventRecord();
      e.setEvent(eventHandle());
      e.setStream(streamHandle());
      break;
    }
    case Op::kEventQuery: call.initEventQuery().setEvent(eventHandle()); break;
    case Op::kEventSynchronize: call.initEventSynchronize().setEvent(eventHandle()); break;
    case Op::kEventElapsedTime: {
      auto e = call.initEventElapsedTime();
      e.setStart(eventHandle());
      e.setEnd(eventHandle());
      break;
    }
    case Op::kDeviceSynchronize: call.initDeviceSynchronize().setDevice(device()); break;
    case Op::kHostFuncDone: {
      auto d = call.initHostFuncDone();
      d.setStream(streamHandle());
      d.setSequence(in_.choose(4) == 0 ? in_.u64() : in_.u8() % 4);
      break;
    }
    default: break;
  }
}

// --- hostile values ---

uint64_t HostileClient::pointer() {
  const size_t choice = in_.choose(10);
  if (choice < 6 && !regions_.empty()) {
    const Region& r = regions_[in_.choose(regions_.size())];
    switch (choice) {
      case 0: return r.address;
      case 1: return r.address + in_.u16() % (r.size + 1);
      case 2: return r.address + r.size - in_.u8() % 8;   // at and around the end
      case 3: return r.address - 1 - in_.u8() % 8;        // just before
      case 4: return r.address + r.size;                  // one past
      default: return r.address + in_.u64();              // wrapping offset
    }
  }
  if (choice == 6 && !hostRegions_.empty()) {
    const HostRegion& h = hostRegions_[in_.choose(hostRegions_.size())];
    return h.deviceAddress + in_.u16() % (h.size + 8);
  }
  if (choice == 7) return kEdgeValues[in_.choose(std::size(kEdgeValues))];
  return in_.u64();
}

uint64_t HostileClient::size() {
  switch (in_.choose(8)) {
    case 0: return in_.u8();
    case 1: return in_.u16();
    case 2: return regions_.empty() ? in_.u8() : regions_[in_.choose(regions_.size())].size;
    case 3: return regions_.empty() ? in_.u16() : regions_[in_.choose(regions_.size())].size + 1 - in_.u8() % 3;
    case 4: return in_.u64();
    case 5: return 1ull << in_.choose(64);
    case 6: return kEdgeValues[in_.choose(std::size(kEdgeValues))];
    default: return 1 + in_.u8() % 64;
  }
}

uint64_t HostileClient::pitch() {
  switch (in_.choose(4)) {
    case 0: return 0;
    case 1: return 512u << in_.choose(3);
    case 2: return kEdgeValues[in_.choose(std::size(kEdgeValues))];
    default: return in_.u16();
  }
}

// Legacy default streams (below kFirstUserStream), a few user streams, or anything.
uint64_t HostileClient::streamHandle() {
  switch (in_.choose(6)) {
    case 0: return in_.u8() % 3;
    case 1: return in_.u64();
    default: return kFirstUserStream + in_.u8() % 4;
  }
}

uint64_t HostileClient::eventHandle() { return in_.choose(8) == 0 ? in_.u64() : kEventBase + in_.u8() % 4; }
uint64_t HostileClient::moduleHandle() { return in_.choose(8) == 0 ? in_.u64() : kModuleBase + in_.u8() % 3; }
uint64_t HostileClient::functionHandle() { return in_.choose(8) == 0 ? in_.u64() : kFunctionBase + in_.u8() % 4; }
uint32_t HostileClient::device() { return in_.choose(16) == 0 ? in_.u32() : 0; }

uint64_t HostileClient::hostAddress() {
  if (!hostRegions_.empty() && in_.choose(4) != 0) {
    const HostRegion& h = hostRegions_[in_.choose(hostRegions_.size())];
    return in_.flag() ? h.clientAddress : h.clientAddress + in_.u16() % (h.size + 8);
  }
  return in_.flag() ? kHostBase + (static_cast<uint64_t>(in_.u8() % 8) << 20) : in_.u64();
}

std::string HostileClient::name() {
  if (in_.choose(8) == 0) return std::string(in_.u8() % 16, static_cast<char>('a' + in_.u8() % 26));
  return kNames[in_.choose(std::size(kNames))];
}

// --- calls ---

void HostileClient::memAlloc(wire::Call::Builder call) {
  auto a = call.initMemAlloc();
  a.setDevice(device());
  const bool pitched = in_.choose(4) == 0;
  const uint64_t requested = in_.choose(4) == 0 ? size() : 1 + in_.u16() % 8192;
  if (pitched) {
    a.setPitchWidth(requested);
    a.setPitchHeight(in_.choose(4) == 0 ? size() : 1 + in_.u8() % 16);
  } else {
    a.setSize(requested);
  }
  const uint64_t height = a.getPitchHeight();
  expectReply(currentId_, [this, pitched, requested, height](wire::Reply::Reader reply) {
    if (pitched && reply.isMemInfo()) {
      regions_.push_back({reply.getMemInfo().getFree(), checkedProduct(reply.getMemInfo().getTotal(), height)});
    } else if (!pitched && reply.isValue()) {
      regions_.push_back({reply.getValue(), requested});
    }
  });
}

void HostileClient::limit(wire::Limit::Builder l) {
  l.setDevice(device());
  l.setLimit(in_.u8() % 16);  // past CU_LIMIT_MAX, within the enum's range: see kFuncSetAttribute
  l.setValue(size());
}

void HostileClient::appendBulk(Frame& frame, uint64_t bytes) {
  uint64_t send = bytes;
  if (in_.choose(16) == 0) send = bytes + in_.u8() % 8 - 4;  // a little short or long
  send = std::min(send, kMaxBulk);
  frame.bulk.append(static_cast<size_t>(send), static_cast<char>(in_.u8()));
}

void HostileClient::memcpy(wire::Call::Builder call, Frame& frame) {
  auto m = call.initMemcpy();
  auto kind = static_cast<wire::CopyKind>(in_.choose(3));
  m.setKind(kind);
  m.setStream(streamHandle());
  const bool hostShared = !hostRegions_.empty() && in_.choose(3) == 0;
  m.setHostShared(hostShared);
  const uint64_t host = hostShared ? hostAddress() : 0;
  m.setDst(kind == wire::CopyKind::DEVICE_TO_HOST && hostShared ? host : pointer());
  m.setSrc(kind == wire::CopyKind::HOST_TO_DEVICE && hostShared ? host : pointer());
  m.setWidth(in_.choose(3) == 0 ? size() : in_.u16() % 2048);
  const size_t heightChoice = in_.choose(4);
  m.setHeight(heightChoice == 0 ? 0 : heightChoice == 1 ? 1 : heightChoice == 2 ? in_.u8() % 32 : size());
  m.setDstPitch(pitch());
  m.setSrcPitch(pitch());
  m.setToken(in_.u64());
  if (kind == wire::CopyKind::HOST_TO_DEVICE && !hostShared) {
    appendBulk(frame, checkedProduct(m.getWidth(), std::max<uint64_t>(m.getHeight(), 1)));
  }
  expectReply(currentId_);
}

void HostileClient::memset(wire::Call::Builder call) {
  auto s = call.initMemset();
  s.setStream(streamHandle());
  s.setDst(pointer());
  s.setValue(in_.u32());
  s.setWidth(in_.choose(3) == 0 ? size() : in_.u16() % 2048);
  s.setHeight(in_.choose(2) == 0 ? 1 : size());
  s.setPitch(pitch());
  constexpr uint8_t kElementSizes[] = {0, 1, 2, 4, 3, 8, 255};
  s.setElementSize(kElementSizes[in_.choose(std::size(kElementSizes))]);
  expectReply(currentId_);
}

int HostileClient::makeMemfd(uint64_t bytes, bool seal) {
  int fd = ::memfd_create("tally-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  memfds_.push_back(fd);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) return -1;
  if (seal) ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK);
  return fd;
}

// Declared size and the memfd's real size may differ; the descriptor may be missing.
void HostileClient::hostRegister(wire::Call::Builder call, Frame& frame) {
  auto h = call.initHostRegister();
  const uint64_t clientAddress = hostAddress();
  const uint64_t declared = in_.choose(4) == 0 ? size() : 4096ull * (1 + in_.u8() % 16);
  const uint64_t actual = in_.choose(4) == 0 ? std::min<uint64_t>(in_.u16(), kMaxMemfd)
                                             : std::min<uint64_t>(declared, kMaxMemfd);
  h.setClientAddress(clientAddress);
  h.setSize(declared);
  int memfd = -1;
  if (frame.fd < 0 && in_.choose(8) != 0) {
    memfd = makeMemfd(actual, in_.choose(4) != 0);
    frame.fd = memfd >= 0 ? ::dup(memfd) : -1;
  }
  expectReply(currentId_, [this, clientAddress, declared, memfd](wire::Reply::Reader reply) {
    if (memfd >= 0 && reply.isValue()) hostRegions_.push_back({clientAddress, declared, reply.getValue(), memfd});
  });
}

// Shared words: 0 (notices), a word in a host region (aligned or not), or anything.
void HostileClient::hostFunc(wire::Call::Builder call) {
  auto f = call.initHostFunc();
  f.setStream(streamHandle());
  f.setCallback(in_.u64());
  if (in_.flag()) {
    f.setReachedWord(hostAddress());
    f.setDoneWord(hostAddress());
  }
  f.setSharedSequence(in_.u8() % 4);
  expectReply(currentId_);
}

void HostileClient::moduleLoad(wire::Call::Builder call, Frame& frame) {
  auto m = call.initModuleLoad();
  m.setDevice(device());
  m.setModule(moduleHandle());
  m.setKind(static_cast<wire::ImageKind>(in_.choose(3)));
  const bool reuse = !sentImages_.empty() && in_.choose(3) == 0;
  std::string image = reuse ? sentImages_[in_.choose(sentImages_.size())]
                            : std::string(1 + in_.u8() % 96, static_cast<char>(in_.u8()));
  const uint64_t ptxSize = in_.choose(3) == 0 ? image.size() / 2 : 0;
  const bool hasImage = !reuse || in_.choose(4) == 0;
  hash::ContentHash hash = hash::contentHash(image.data(), image.size());
  if (in_.choose(16) == 0) hash[0] ^= 1;  // an image under someone else's hash
  const size_t hashBytes = in_.choose(32) == 0 ? in_.u8() % 40 : hash.size();
  std::string hashData(reinterpret_cast<const char*>(hash.data()), hash.size());
  hashData.resize(hashBytes, '\0');
  m.setHash(kj::arrayPtr(reinterpret_cast<const kj::byte*>(hashData.data()), hashData.size()));
  m.setImageSize(in_.choose(16) == 0 ? size() : image.size() - ptxSize);
  m.setPtxSize(ptxSize);
  m.setHasImage(hasImage);
  if (hasImage) {
    frame.bulk += image;
    if (!reuse) sentImages_.push_back(image);
  }
  expectReply(currentId_);
}

void HostileClient::moduleGetFunction(wire::Call::Builder call) {
  auto f = call.initModuleGetFunction();
  f.setModule(moduleHandle());
  const uint64_t handle = functionHandle();
  f.setFunction(handle);
  f.setName(name());
  expectReply(currentId_, [this, handle](wire::Reply::Reader reply) {
    if (!reply.isFunction()) return;
    size_t bytes = 0;
    for (auto p : reply.getFunction().getParams()) bytes = std::max<size_t>(bytes, p.getOffset() + p.getSize());
    paramBytes_[handle] = bytes;
  });
}

void HostileClient::moduleGetGlobal(wire::Call::Builder call) {
  auto g = call.initModuleGetGlobal();
  g.setModule(moduleHandle());
  g.setName(name());
  expectReply(currentId_, [this](wire::Reply::Reader reply) {
    if (reply.isGlobal()) regions_.push_back({reply.getGlobal().getPtr(), reply.getGlobal().getSize()});
  });
}

void HostileClient::occupancy(wire::Call::Builder call) {
  auto o = call.initOccupancy();
  o.setFunction(functionHandle());
  o.setBlockSize(static_cast<int32_t>(in_.choose(4) == 0 ? in_.u32() : 32u << in_.choose(6)));
  o.setDynamicSmem(in_.choose(4) == 0 ? size() : in_.u16());
  o.setFlags(in_.u8());
  o.setAvailableDynamicSmem(in_.flag());
  o.setNumBlocks(static_cast<int32_t>(in_.u32()));
  expectReply(currentId_);
}

// Parameter buffers of the size the function takes, or a little off; shapes and attributes
// mostly sane, sometimes not.
void HostileClient::launchKernel(wire::Call::Builder call) {
  auto l = call.initLaunchKernel();
  const uint64_t function = functionHandle();
  l.setFunction(function);
  auto setDim = [this](wire::Dim3::Builder d) {
    const bool hostile = in_.choose(8) == 0;
    d.setX(hostile ? in_.u32() : 1 + in_.u8() % 64);
    d.setY(hostile ? in_.u32() : 1);
    d.setZ(hostile ? in_.u32() : 1);
  };
  setDim(l.initGrid());
  setDim(l.initBlock());
  l.setSharedMem(in_.choose(8) == 0 ? in_.u32() : in_.u16() % 4096);
  l.setStream(streamHandle());
  auto known = paramBytes_.find(function);
  size_t bytes = known != paramBytes_.end() && in_.choose(8) != 0 ? known->second : in_.u8() % 40;
  std::string params(bytes, static_cast<char>(in_.u8()));
  l.setParams(kj::arrayPtr(reinterpret_cast<const kj::byte*>(params.data()), params.size()));
  l.setCooperative(in_.choose(8) == 0);
  if (in_.choose(4) == 0) {
    auto attributes = l.initAttributes(1 + in_.choose(3));
    for (auto a : attributes) {
      a.setId(in_.u8() % 16);  // see kFuncSetAttribute
      a.initValue().setX(in_.u32());
      a.getValue().setY(in_.u8());
      a.getValue().setZ(in_.u8());
    }
  }
  expectReply(currentId_);
}

// What a hostile client does to memory it shared: shrink it under the server (a sealed
// memfd refuses).
void HostileClient::shrinkSharedMemory() {
  if (hostRegions_.empty()) return;
  const HostRegion& h = hostRegions_[in_.choose(hostRegions_.size())];
  [[maybe_unused]] int rc = ::ftruncate(h.memfd, 0);
}

}  // namespace tally::fuzz
