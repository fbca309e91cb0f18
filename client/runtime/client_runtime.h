// The client's one process-global object, created on the first CUDA call that needs tallyd
// (registration at load time does not connect). Everything else hangs off it: the
// connection, what tallyd said about its devices, handle tables, per-thread CUDA state.
#pragma once

#include "client/runtime/callback_table.h"
#include "client/runtime/landing_areas.h"
#include "client/runtime/handles.h"
#include "client/transport/connection.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <array>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tally::client {

struct DeviceView {
  std::string name;
  int major = 0;
  int minor = 0;
  size_t totalMem = 0;
  cudaDeviceProp properties{};
  std::vector<int> attributes;
  int streamPriorityLeast = 0;
  int streamPriorityGreatest = 0;
  CUuuid uuid{};
  std::vector<std::vector<int>> p2p;  // [peer][CUdevice_P2PAttribute], in the tenant's numbering
  int attribute(int a) const { return a >= 0 && static_cast<size_t>(a) < attributes.size() ? attributes[a] : 0; }
  int p2pAttribute(size_t peer, int a) const {
    return peer < p2p.size() && a >= 0 && static_cast<size_t>(a) < p2p[peer].size() ? p2p[peer][a] : 0;
  }
};

// The code of a module as it is sent to tallyd: the image its device loads, and for a cubin the
// PTX it was compiled from when the fatbin carries it (tallyd transforms kernels from PTX).
struct SelectedImage {
  std::string bytes;
  bool ptx = false;
  std::string sourcePtx;
};

struct HostRegion {
  size_t size = 0;
  unsigned flags = 0;          // cudaHostAlloc flags, for cudaHostGetFlags
  bool shared = false;        // memfd mapped by tallyd
  uint64_t serverAddress = 0;  // where tallyd mapped it (the device pointer, when registered)
  // cudaHostRegister'ed application memory (client/api/host_register.cc): the client never
  // frees it; `userBase`/`userSize` are what the application passed (the region itself spans
  // whole pages when they were moved into shared memory).
  bool registered = false;
  // Managed memory (cudaMallocManaged): shared memory tallyd maps at this same address, so the
  // one pointer is valid on the host and in kernels (client/api/managed_memory.cc).
  bool managed = false;
  uintptr_t userBase = 0;
  size_t userSize = 0;
};

struct DeviceRegion {
  size_t size = 0;
  uint32_t device = 0;
  // From a memory pool (cudaMallocAsync and kin): the driver refuses stream memory operations
  // on such words, while tallyd's pooled backing of cudaMalloc must not make the others differ.
  bool streamOrdered = false;
  // Made by cudaMalloc/cuMemAlloc (pitched too) or from a pool: what cudaDeviceReset frees;
  // false for module globals, virtual-memory mappings and opened IPC handles.
  bool allocation = false;
};

using CallBuilder = std::function<void(wire::Call::Builder)>;

class ClientRuntime {
 public:
  static ClientRuntime& get();

  // --- connection -------------------------------------------------------------------
  // CUDA_SUCCESS once connected; otherwise the error every call returns (logged once).
  CUresult ready();
  Connection& connection() { return *connection_; }
  // One-way call; its error surfaces at the next synchronizing call.
  CUresult post(const CallBuilder& build, std::span<const iovec> bulk = {});
  // One-way call written at once, never batched: its bytes follow on the bulk lanes.
  CUresult postNow(const CallBuilder& build);
  // Round trip returning the call's own status. An error of an earlier one-way call that
  // tallyd reports with the reply is kept and returned by the next synchronizing call.
  CUresult call(const CallBuilder& build, ReplyMessage* reply = nullptr, std::span<const iovec> bulk = {}, int fd = -1);
  // Round trip of a synchronizing call (syncs, blocking copies, frees): also returns the
  // pending error of earlier one-way calls, as the native runtime does. Over shared rings the
  // call names a completion word (Connection::takeCompletionSlot), so it can end before the
  // reply is read.
  CUresult sync(const CallBuilder& build, ReplyMessage* reply = nullptr, std::span<const iovec> bulk = {});
  uint64_t newHandleId() { return nextHandleId_.fetch_add(1); }
  // A stream is *drained* when a reply proved all its work done (a stream sync, a waited copy
  // from it) and nothing at all was sent since: syncing or querying it again needs no round trip
  // (PyTorch's .item() is a copy to the host followed by a sync of the same stream). `message`:
  // Connection::lastMessageOfThisThread() of the call whose reply proved it.
  void noteStreamDrained(uint64_t stream, uint64_t message);
  bool streamDrained(uint64_t stream);
  // What a synchronizing call returns for earlier one-way calls (and clears).
  CUresult takePendingAsyncError() { return static_cast<CUresult>(pendingAsyncError_.exchange(CUDA_SUCCESS)); }
  // Host callbacks: counted when enqueued and when run; waitForHostCallbacks returns once
  // every callback enqueued before the call has run.
  void hostCallbackEnqueued() { hostCallbacksEnqueued_.fetch_add(1); }
  void waitForHostCallbacks();
  // Callbacks that travel as HostFuncReady messages: the wire carries their id only.
  CallbackTable& messageCallbacks() { return messageCallbacks_; }

  // Round trips whose replies are awaited later (pipelined copies); `pending.id` is set here.
  CUresult startCall(Connection::PendingCall& pending, const CallBuilder& build);
  CUresult finishCall(Connection::PendingCall& pending);

  // Host memory shared with tallyd (Unix sockets): a memfd of `size` bytes mapped here and
  // registered there. `serverAddress` is its device-visible address in tallyd (0 if the driver
  // could not register it).
  CUresult mapSharedHostMemory(size_t size, void*& out, uint64_t& serverAddress);
  // The staging area for pageable copies, or nullptr when memory cannot be shared. Opened on
  // first use, after the handshake (opening it is itself a call).
  class StagingRing* stagingRing();
  // Shared words for host callbacks (host_callback_words.h), or nullptr when memory cannot be
  // shared (callbacks then go through HostFuncReady/HostFuncDone messages).
  class HostCallbackWords* hostCallbackWords();
  // Landing areas for small copies into pageable memory (landing_areas.h), or nullptr when
  // memory cannot be shared with tallyd's GPU or TALLY_COMPLETION_WORDS=0.
  LandingAreas* landingAreas();

  // --- devices ----------------------------------------------------------------------
  int deviceCount() const { return static_cast<int>(devices_.size()); }
  const DeviceView& device(int ordinal) const { return devices_[ordinal]; }
  bool sharedHostMemory() const { return sharedHostMemory_; }
  int driverVersion() const { return driverVersion_; }

  // --- streams ----------------------------------------------------------------------
  // Creates a stream handle on `device` (one-way: the id is ours); nullptr if it cannot be sent.
  StreamHandle* createStream(uint32_t device, unsigned flags, int priority);
  // Wire id of a stream handle (legacy default / per-thread / created), 0 if invalid.
  uint64_t streamId(CUstream stream);
  uint32_t streamDevice(CUstream stream);

  // --- memory tables ------------------------------------------------------------------
  void addDeviceRegion(CUdeviceptr base, DeviceRegion region);
  // The allocations (DeviceRegion::allocation) on `device`, by base.
  std::vector<std::pair<CUdeviceptr, DeviceRegion>> allocationsOn(uint32_t device);
  bool removeDeviceRegion(CUdeviceptr base);
  std::optional<std::pair<CUdeviceptr, DeviceRegion>> findDeviceRegion(uint64_t address);
  void addHostRegion(const void* base, HostRegion region);
  std::optional<HostRegion> removeHostRegion(const void* base);
  std::optional<std::pair<uintptr_t, HostRegion>> findHostRegion(const void* address);
  // Every host region that overlaps [begin, end).
  std::vector<std::pair<uintptr_t, HostRegion>> hostRegionsOverlapping(uintptr_t begin, uintptr_t end);

  // --- registration (no connection needed) --------------------------------------------
  FatbinRecord* registerFatbin(const void* wrapper);
  void registerKernel(FatbinRecord* fatbin, const void* hostFunction, const char* deviceName);
  void registerVariable(FatbinRecord* fatbin, const void* hostVariable, const char* deviceName, size_t size);
  KernelRecord* kernelFor(const void* hostFunctionOrKernel);
  VariableRecord* variableFor(const void* hostVariable);

  // --- modules ------------------------------------------------------------------------
  struct OccupancyQuery {
    int blockSize = 0;
    size_t dynamicSmem = 0;
    unsigned flags = 0;
    bool availableDynamicSmem = false;  // ask for bytes of dynamic smem left with numBlocks
    int numBlocks = 0;
    // Thread-block clusters: the configuration the question is about (set: a cluster question).
    struct Clusters {
      std::array<unsigned, 3> grid{}, block{}, clusterDim{};
      bool potentialSize = false;  // the largest cluster size, else the number of active clusters
    };
    std::optional<Clusters> clusters;

    static OccupancyQuery maxActiveBlocks(int blockSize, size_t dynamicSmem, unsigned flags) {
      OccupancyQuery q;
      q.blockSize = blockSize;
      q.dynamicSmem = dynamicSmem;
      q.flags = flags;
      return q;
    }
    static OccupancyQuery availableSmem(int blockSize, int numBlocks) {
      OccupancyQuery q;
      q.blockSize = blockSize;
      q.availableDynamicSmem = true;
      q.numBlocks = numBlocks;
      return q;
    }
  };
  CUresult queryOccupancy(const FunctionHandle& f, const OccupancyQuery& q, uint64_t& value);
  CUresult loadModuleImage(const void* image, uint32_t device, ModuleHandle*& out);
  // cuLibraryLoadData of an image with no code for the device succeeds natively, and each
  // lookup in it answers CUDA_ERROR_NO_BINARY_FOR_GPU (cuBLAS loads all its libraries so):
  // such a library, with nothing in tallyd.
  ModuleHandle* libraryWithoutCode(uint32_t device);
  CUresult functionOf(ModuleHandle* module, const char* name, FunctionHandle*& out);
  CUresult functionOf(KernelRecord* kernel, uint32_t device, FunctionHandle*& out);
  // What a runtime `func` argument names (cudaLaunchKernel, cudaFuncGetAttributes, ...): a host
  // function or a cudaKernel_t from cudaGetKernel (a KernelRecord, resolved on `device`), or a
  // cudaKernel_t from cudaLibraryGetKernel (a FunctionHandle of its library, which lives on the
  // library's device). CUDA_ERROR_INVALID_HANDLE for anything else.
  CUresult runtimeFunction(const void* func, uint32_t device, FunctionHandle*& out);
  CUresult variableAddress(VariableRecord* variable, uint32_t device, CUdeviceptr& out);
  CUresult unloadModule(ModuleHandle* module);
  // The live function handle with wire id `id` (what tallyd names a graph's kernel node by), or
  // nullptr; and the host function (or cudaKernel_t record) whose kernel `f` is, nullptr for a
  // function of a module the application loaded itself (cudaGraphKernelNodeGetParams).
  FunctionHandle* functionById(uint64_t id);
  const void* hostFunctionOf(const FunctionHandle* f);

 private:
  ClientRuntime();
  ~ClientRuntime();
  void connect();
  void runHostFunc(const HostFuncNotice& notice);
  CUresult ensureFatbinModule(FatbinRecord& fatbin, uint32_t device, ModuleHandle*& out);
  CUresult sendModule(const SelectedImage& image, uint32_t device, ModuleHandle*& out);

  std::once_flag stagingRingOnce_;
  std::unique_ptr<class StagingRing> stagingRing_;
  MapSharedRegion sharedRegionMapper();  // mapSharedHostMemory, for the shared word regions
  // A round trip; `word`: it names a completion word if one is free (and words are not off).
  CUresult roundTrip(const CallBuilder& build, ReplyMessage* reply, std::span<const iovec> bulk, int fd, bool word);

  bool completionWordsOff_ = false;  // TALLY_COMPLETION_WORDS=0
  std::once_flag landingAreasOnce_;
  std::unique_ptr<LandingAreas> landingAreas_;
  std::once_flag callbackWordsOnce_;
  std::unique_ptr<class HostCallbackWords> callbackWords_;
  std::once_flag connectOnce_;
  CUresult connectStatus_ = CUDA_ERROR_NOT_INITIALIZED;
  std::unique_ptr<Connection> connection_;
  std::vector<DeviceView> devices_;
  bool sharedHostMemory_ = false;
  int driverVersion_ = 0;
  std::atomic<uint64_t> nextHandleId_{1u << 16};
  std::atomic<int> pendingAsyncError_{CUDA_SUCCESS};
  std::atomic<uint64_t> hostCallbacksEnqueued_{0};
  std::atomic<uint64_t> hostCallbacksRun_{0};
  CallbackTable messageCallbacks_;

  std::mutex drainedMutex_;
  std::unordered_map<uint64_t, uint64_t> drained_;  // stream id -> message whose reply drained it
  std::mutex tablesMutex_;
  std::map<CUdeviceptr, DeviceRegion> deviceRegions_;
  std::map<uintptr_t, HostRegion> hostRegions_;

  std::mutex registryMutex_;
  std::vector<std::unique_ptr<FatbinRecord>> fatbins_;
  std::unordered_map<const void*, std::unique_ptr<KernelRecord>> kernels_;  // by host function
  std::unordered_set<const void*> kernelRecords_;  // the records themselves (cudaKernel_t)
  std::unordered_map<const void*, std::unique_ptr<VariableRecord>> variables_;
  std::unordered_map<uint64_t, FunctionHandle*> functionsById_;  // every one resolved; live ones are registered
};

// --- per-thread CUDA state --------------------------------------------------------------
struct ThreadState {
  int device = 0;
  cudaError_t lastError = cudaSuccess;
  StreamHandle* perThreadStream = nullptr;
  std::vector<CUcontext> contextStack;
  struct LaunchConfig {
    dim3 grid, block;
    size_t sharedMem;
    cudaStream_t stream;
  };
  std::vector<LaunchConfig> launchConfigs;
};
ThreadState& threadState();

// The legacy default stream: CU_STREAM_LEGACY, or null except inside a per-thread twin.
bool isLegacyStream(CUstream stream);

// Runtime API results: maps a driver result to the runtime's code and records it as the
// thread's last error when it is one.
cudaError_t toRuntime(CUresult r);
cudaError_t finish(CUresult r);
cudaError_t finishRuntime(cudaError_t e);

}  // namespace tally::client
