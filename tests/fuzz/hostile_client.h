// The client side of a fuzzed session: turns the fuzzer's bytes into a Hello and then frames
// of typed calls (schema/*.capnp), with sizes, pointers, pitches, handles and descriptors
// picked to be hostile — near the edges of what tallyd handed out (allocations, globals,
// host mappings), wrapping products, stale and foreign handles, memfds smaller than declared.
// It waits for the replies of each frame like a real client, and learns from them the
// addresses it can then aim at.
#pragma once

#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"
#include "tests/fuzz/session_input.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tally::fuzz {

class HostileClient {
 public:
  // `fd`: the client end of a connected socket; `in`: the input, read as choices.
  HostileClient(int fd, InputBytes& in);
  ~HostileClient();

  // Hello, then frames until the input is used up or tallyd drops the connection.
  void run();

 private:
  // One frame as it is being built: the bulk bytes that follow the message, and the
  // descriptor (or -1) that rides along.
  struct Frame {
    std::string bulk;
    int fd = -1;
  };
  struct Region {  // device memory tallyd told us about: allocation or module global
    uint64_t address;
    uint64_t size;
  };
  struct HostRegion {  // memory shared by memfd (hostRegister)
    uint64_t clientAddress;
    uint64_t size;
    uint64_t deviceAddress;
    int memfd;  // in memfds_: kept, so the client can shrink it afterwards
  };
  using ReplyHandler = std::function<void(wire::Reply::Reader)>;
  // The calls, one code each; the input picks among them.
  enum class Op : uint8_t {
    kMemAlloc, kMemFree, kMemcpy, kMemset, kMemGetInfo, kHostRegister, kHostUnregister, kStreamCreate,
    kStreamDestroy, kStreamSynchronize, kStreamQuery, kStreamWaitEvent, kEventCreate, kEventDestroy, kEventRecord,
    kEventQuery, kEventSynchronize, kEventElapsedTime, kDeviceSynchronize, kHostFunc, kHostFuncDone, kModuleLoad,
    kModuleUnload, kModuleGetFunction, kModuleGetGlobal, kFuncSetAttribute, kOccupancy, kLaunchKernel, kSetLimit,
    kGetLimit, kCount
  };


  bool sendHello();
  bool sendCallFrame();
  bool awaitReplies();
  void fillCall(wire::Call::Builder call, Frame& frame);

  // Hostile values.
  uint64_t pointer();
  uint64_t size();
  uint64_t pitch();
  uint64_t streamHandle();
  uint64_t eventHandle();
  uint64_t moduleHandle();
  uint64_t functionHandle();
  uint32_t device();
  uint64_t hostAddress();
  std::string name();

  // One filler per call family member.
  void memAlloc(wire::Call::Builder call);
  void memcpy(wire::Call::Builder call, Frame& frame);
  void memset(wire::Call::Builder call);
  void hostRegister(wire::Call::Builder call, Frame& frame);
  void hostFunc(wire::Call::Builder call);
  void moduleLoad(wire::Call::Builder call, Frame& frame);
  void moduleGetFunction(wire::Call::Builder call);
  void moduleGetGlobal(wire::Call::Builder call);
  void occupancy(wire::Call::Builder call);
  void launchKernel(wire::Call::Builder call);
  void limit(wire::Limit::Builder limit);
  void streamCall(Op op, wire::Call::Builder call);
  void shrinkSharedMemory();
  // Bulk bytes for a host-to-device copy of `bytes`: usually exactly that many (when small
  // enough to send), sometimes a few more or fewer.
  void appendBulk(Frame& frame, uint64_t bytes);
  // A memfd of `bytes`, sealed against shrinking or not (-1 on failure); closed with the client.
  int makeMemfd(uint64_t bytes, bool seal);

  // Called for a call with an id: how to learn from its reply.
  void expectReply(uint64_t id, ReplyHandler handler = {});

  int fd_;
  InputBytes& in_;
  frame::StreamReader reader_;
  uint64_t nextId_ = 1;
  uint64_t currentId_ = 0;
  std::map<uint64_t, ReplyHandler> pending_;
  std::vector<Region> regions_;
  std::vector<HostRegion> hostRegions_;
  std::vector<std::string> sentImages_;     // image + PTX bytes sent with their hash
  std::map<uint64_t, size_t> paramBytes_;   // function handle -> parameter buffer size
  std::vector<int> memfds_;                  // every memfd made, closed at the end
};

}  // namespace tally::fuzz
