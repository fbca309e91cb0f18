// A tallyd stand-in for client tests without a GPU: one client on a Unix socket, a Welcome for
// one fake device (or more: offerDevices; each with the launch limits kFakeLaunchLimits as its
// only device attributes), a Reply (status 0) to every call that wants one; device-to-host copies get
// their bytes (all 0xAB) as Reply bulk (array copies to the host too), texture and surface objects
// values from 0x101 on, library calls 8 output bytes counting the library
// round trips so far (1, 2, ...: no two answers alike); graph nodes added get fresh ids, exec updates
// succeed (the host node words of the last graph launch are kept); JIT link
// calls wall time 1.5 ms and the logs as the driver writes them: none at LinkCreate, kFakeErrorLog
// (and CUDA_ERROR_INVALID_PTX) for an input named kFakeBrokenInput, kFakeInfoLog and
// kFakeErrorLog with the image kFakeLinkedImage at LinkComplete. It counts the calls it receives,
// so a test can assert that a refused call sent nothing (in all, or of one kind), and can send
// HostFuncReady notices of its own choosing. Every module has the kernels kFakeKernelNames, in
// that order (moduleFunctionNames), each taking one 8-byte parameter and with the attributes
// kFakeMaxThreadsPerBlock and kFakeNumRegs (moduleGetFunction; another name gets
// CUDA_ERROR_NOT_FOUND), and one global, kFakeGlobalName (kFakeGlobalBytes at kFakeGlobalAddress;
// another name: CUDA_ERROR_NOT_FOUND).
#pragma once

#include "common/frame/shared_ring.h"
#include "schema/envelope.capnp.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tally::frame {
class StreamReader;
}

namespace tally::testing {

inline constexpr char kFakeInfoLog[] = "fake info log";
inline constexpr char kFakeErrorLog[] = "fake error log";
inline constexpr char kFakeLinkedImage[] = "fake linked cubin";
inline constexpr char kFakeBrokenInput[] = "broken.ptx";
inline constexpr const char* kFakeKernelNames[] = {"kernel_a", "kernel_b", "kernel_c"};
inline constexpr int kFakeMaxThreadsPerBlock = 768;
inline constexpr int kFakeNumRegs = 42;
inline constexpr char kFakeGlobalName[] = "fake_global";
inline constexpr uint64_t kFakeGlobalAddress = 0x7d0000000040;
inline constexpr uint64_t kFakeGlobalBytes = 12;
// Device attributes of every fake device, index = CUdevice_attribute: max threads per block,
// max block dims x, y, z, max grid dims x, y, z (those a launch is checked against).
inline constexpr int kFakeLaunchLimits[] = {0, 1024, 1024, 1024, 64, 2147483647, 65535, 65535};

class FakeTallyd {
 public:
  FakeTallyd();  // listening on a fresh socket path once constructed
  ~FakeTallyd();

  std::string endpoint() const { return "unix:" + path_; }
  // Calls received so far (one-way and round trips), and frames whose bulk was all zeros.
  uint64_t calls() const { return calls_.load(); }
  uint64_t zeroBulkFrames() const { return zeroBulkFrames_.load(); }
  // Calls of one kind received so far.
  uint64_t callsOf(wire::Call::Which kind);
  // The operations of the last StreamMemOps call.
  struct MemOp {
    uint32_t operation;
    uint64_t address;
    uint64_t value;
    uint32_t flags;
  };
  std::vector<MemOp> lastStreamMemOps();
  // The last LinkCreate the client sent: its value options and log buffer sizes.
  struct LinkCreated {
    std::vector<std::pair<uint32_t, uint64_t>> options;
    uint32_t infoLogBytes = 0, errorLogBytes = 0;
    bool wallTime = false;
  };
  LinkCreated lastLinkCreate();
  // Callback ids the client sent in HostFunc calls.
  std::vector<uint64_t> hostFuncCallbacks();
  // Sends HostFuncReady naming `callback` on `stream`.
  void sendHostFuncReady(uint64_t stream, uint64_t callback);

  // Before the client connects: the Welcome offers `count` devices (uuids 0x11.., 0x22.., ...,
  // every two of them peers)
  // and, when `shared`, maps client memfds (hostRegister: the descriptor is mapped here and
  // answered with a device address kFakeHostDeviceBase + its offset; device-to-host copies into
  // such memory write their 0xAB bytes into the mapping instead of sending them).
  void offerDevices(unsigned count) { deviceCount_ = count; }
  void offerSharedHostMemory(bool shared) { sharedHostMemory_ = shared; }
  // The client's frames came through its shared rings (accepted with shared host memory).
  bool usesSharedRings() const { return ringsOffered_.load(); }
  // A call that names a completion word (over the rings) has its word stored at once and its
  // reply written `delay` later, as tallyd's reply can trail the word.
  void delayRepliesAfterWords(std::chrono::milliseconds delay) { wordReplyDelay_ = delay; }
  // Answer hostRegister with the client's own address as the device address (what tallyd does
  // when it maps the memory at the same address and the driver uses host pointers).
  void mapHostAtClientAddress(bool same) { sameHostAddress_ = same; }
  static constexpr uint64_t kFakeHostDeviceBase = 0x7e0000000000;
  struct HostMapping {
    uint64_t clientAddress = 0;
    size_t size = 0;
    char* local = nullptr;  // the fake's own mapping of the client's memfd
  };
  std::vector<HostMapping> hostMappings();
  // The last Hello: whether CUDA_VISIBLE_DEVICES was set, and its entries.
  std::pair<bool, std::vector<std::string>> helloDevices();
  // The device of the last memAlloc call.
  uint32_t lastAllocDevice();
  // The stream of the last memset call (0: none yet).
  uint64_t lastMemsetStream();
  // The function handle of the last launchKernel call, and the handle the client chose for the
  // kernel `name` at its last moduleGetFunction (0: none yet).
  uint64_t lastLaunchFunction();
  uint64_t functionIdOf(const std::string& name);
  // The attribute ids the last launchKernel call carried.
  std::vector<uint32_t> lastLaunchAttributeIds();
  // The host node words of the last graphLaunch (schema/graph.capnp HostNodeLaunch).
  struct HostNodeWords {
    uint32_t node;
    uint64_t reachedWord, doneWord;
    uint32_t sequence;
  };
  std::vector<HostNodeWords> lastGraphLaunchHostNodes();

 private:
  void serve();
  bool handleFrame(class FrameView& frame);
  void record(wire::Call::Reader call);
  void write(const std::vector<char>& bytes);
  std::vector<char> welcome(bool sharedRing = false);
  // hostRegister/hostUnregister (with the client's descriptor) and copies into mapped memory.
  void hostMemoryCall(wire::Call::Reader call, wire::Reply::Builder reply);

  std::string path_;
  int listenFd_ = -1;
  std::atomic<int> clientFd_{-1};
  std::mutex writeMutex_;
  std::mutex stateMutex_;
  std::vector<uint64_t> hostFuncCallbacks_;
  std::map<wire::Call::Which, uint64_t> callsByKind_;
  std::vector<MemOp> lastStreamMemOps_;
  LinkCreated lastLinkCreate_;
  std::atomic<std::chrono::milliseconds> wordReplyDelay_{std::chrono::milliseconds(0)};
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> zeroBulkFrames_{0};
  std::atomic<uint64_t> libraryRoundTrips_{0};
  std::atomic<uint64_t> nextAddress_{0x7f0000100000};
  std::atomic<uint32_t> nextGraphNode_{0};
  std::atomic<unsigned> deviceCount_{1};
  std::atomic<bool> sharedHostMemory_{false};
  std::unique_ptr<frame::SharedRings> rings_;  // writeMutex_: the client's, once accepted
  std::atomic<bool> ringsOffered_{false};
  std::atomic<bool> sameHostAddress_{false};
  frame::StreamReader* reader_ = nullptr;
  std::vector<HostMapping> hostMappings_;
  bool helloRestricts_ = false;
  std::vector<std::string> helloEntries_;
  uint32_t lastAllocDevice_ = 0;
  uint64_t lastMemsetStream_ = 0;
  uint64_t lastLaunchFunction_ = 0;
  std::vector<uint32_t> lastLaunchAttributeIds_;
  std::vector<HostNodeWords> lastGraphLaunchHostNodes_;
  std::map<std::string, uint64_t> functionIds_;
  std::thread thread_;
};

// The fake tallyd of this test process, with TALLY_SERVER pointing at it; created on first use,
// which must come before the client's first CUDA call (it connects then).
FakeTallyd& processFakeTallyd();

}  // namespace tally::testing
