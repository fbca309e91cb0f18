// A fake GPU for the session fuzzer: built as libcuda.so.1 into its own directory and dlopened
// by tallyd's driver shim (server/gpu/driver_loader) exactly as the real driver would be.
//
// Host memory stands in for device memory, so a handler whose range check is wrong writes
// outside a heap block and AddressSanitizer says where:
//  - device allocations are malloc'd with their exact size (no rounding up that would hide
//    an overrun); a free hands the block back to malloc, so a later use is a use-after-free;
//  - copies, memsets and stream memory operations are real memcpy/memset/loads/stores;
//  - streams, events, modules and functions are heap objects, and every call reads the one it
//    is given: a handle used after its destroy call is a use-after-free too;
//  - work completes at once (events are always reached, syncs return at once);
//  - memory pools count their used and reserved bytes, and a stream-ordered free stays
//    outstanding (cuMemPoolTrimTo keeps it) until a synchronize of its stream (FakePool);
//  - a kernel launch reads every parameter at the size cuFuncGetParamInfo reported for it, as
//    the real driver copies them, so a short parameter buffer is an overread; a kernel whose name
//    starts with "add" adds 1 to the u32 its first parameter points at (graph replays show), and
//    one whose name starts with "fail" is refused (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
//  - stream capture records work as graph nodes instead of doing it (kernels, copies, memsets),
//    a graph launch does its nodes in order; a sync or query of a capturing stream is refused
//    and invalidates the capture, as the driver does. tallyFakeLiveGraphs() counts graphs and
//    executable graphs not destroyed (a test's check that a tenant's end destroys its own).
// Exports carry the versioned names the shim resolves (cuMemAlloc_v2, ...), so this file
// includes cuda.h with __CUDA_API_VERSION_INTERNAL like the shim does.
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_VERSION_INTERNAL_ODR 1
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

// Small enough that the fuzzer's allocations stay cheap; what cuMemGetInfo reports as total.
constexpr size_t kDeviceBytes = 32u << 20;
constexpr size_t kHostAllocLimit = 32u << 20;
constexpr size_t kPitchAlignment = 512;
constexpr uint32_t kLiveMagic = 0x7a11f00d;
// Launch attribute ids this CUDA version knows (cuda.h has no _MAX for them); more recent
// ones than the handlers forward are refused as the driver refuses unknown ids.
constexpr int kLastLaunchAttribute = 32;

// Every fake object starts with a magic word that each call reads: reading it from a freed
// object is what makes ASan name the stale handle.
struct FakeObject {
  uint32_t magic = kLiveMagic;
};

struct FakeGraph;

struct FakeStream : FakeObject {
  FakeGraph* capture = nullptr;  // the graph this stream's work goes to while it captures
  bool origin = false;           // it began the capture (others joined through an event)
};
struct FakeEvent : FakeObject {
  FakeGraph* capturedIn = nullptr;  // last recorded in a capture
};
struct FakeContext : FakeObject {};
struct FakeModule;

struct FakeFunction : FakeObject {
  FakeModule* module = nullptr;
  std::string name;
  std::map<int, int> attributes;
};

struct FakeModule : FakeObject {
  std::map<std::string, std::unique_ptr<FakeFunction>> functions;
  std::map<std::string, void*> globals;  // malloc'd, freed with the module
};

// A node: a kernel (function, shape, its own copy of each parameter) or other work to redo.
struct FakeNode : FakeObject {
  FakeGraph* graph = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedMem = 0;
  std::vector<std::vector<unsigned char>> params;
  std::vector<void*> paramPointers;
  std::function<CUresult()> work;  // nodes other than kernels
  const FakeNode* original = nullptr;  // in a clone: the node it was copied from
  CUDA_MEMSET_NODE_PARAMS memset{};     // a memset node's parameters
  bool enabled = true;                  // in an executable graph: cuGraphNodeSetEnabled
};

struct FakeGraph : FakeObject {
  std::vector<std::unique_ptr<FakeNode>> nodes;
  std::vector<std::pair<FakeNode*, FakeNode*>> edges;  // only listed: nodes run in the order added
  std::vector<FakeStream*> joined;  // streams in its capture besides the origin
  uint64_t captureId = 0;
  bool invalidated = false;
};

struct FakeExec : FakeObject {
  FakeGraph* source = nullptr;  // nodes of the graph it was instantiated from, by position
  std::vector<FakeNode> nodes;
};

std::atomic<size_t> liveGraphs{0};
std::atomic<size_t> programmaticLaunches{0};  // launches with programmatic stream serialization
std::atomic<uint64_t> nextCaptureId{1};

// A memory pool's figures as the driver keeps them: used (allocations not freed yet) and
// reserved (used, plus freed memory the pool keeps). Memory freed with cuMemFreeAsync stays
// outstanding — cuMemPoolTrimTo cannot give it back — until a synchronize of the freeing stream
// has shown the host that the free completed ("Allocations that have been asynchronously freed
// but whose completion has not been observed on the host (eg. by a synchronize) can count as
// outstanding", cuMemPoolTrimTo); a query does not count. The bytes themselves are malloc'd and
// freed at once, as other device memory is.
struct FakePool : FakeObject {
  size_t used = 0;
  size_t reserved = 0;
  size_t usedHigh = 0;
  size_t reservedHigh = 0;
  std::map<CUstream, size_t> unobservedFrees;  // by freeing stream

  size_t outstanding() const {
    size_t bytes = used;
    for (const auto& [stream, freed] : unobservedFrees) bytes += freed;
    return bytes;
  }
};

struct FakeDriver {
  std::mutex mutex;
  std::map<uintptr_t, size_t> deviceBlocks;  // live cuMemAlloc/pool blocks: address -> size
  size_t deviceBytesInUse = 0;
  std::map<int, size_t> limits;
  std::vector<FakePool*> pools;              // live pools
  std::map<uintptr_t, FakePool*> poolBlocks;  // the blocks allocated from a pool
};

FakeDriver& driver() {
  static FakeDriver* d = new FakeDriver;  // never destroyed: completion threads may outlive main
  return *d;
}

bool live(const FakeObject* o) { return o != nullptr && o->magic == kLiveMagic; }

template <typename T>
CUresult destroy(T* o) {
  if (!live(o)) return CUDA_ERROR_INVALID_HANDLE;
  o->magic = 0;
  delete o;
  return CUDA_SUCCESS;
}

// The default (null) stream is valid; any other stream must be a live FakeStream.
CUresult checkStream(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
  return live(reinterpret_cast<FakeStream*>(s)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult allocateDevice(CUdeviceptr* out, size_t bytes) {
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  FakeDriver& d = driver();
  std::lock_guard lock(d.mutex);
  if (bytes > kDeviceBytes - d.deviceBytesInUse) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = std::malloc(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  d.deviceBlocks[reinterpret_cast<uintptr_t>(p)] = bytes;
  d.deviceBytesInUse += bytes;
  *out = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

// Frees a device block; one of a pool counts as freed on `stream` (observed at once when the
// free is synchronous).
CUresult freeDevice(CUdeviceptr ptr, CUstream stream = nullptr, bool observed = true) {
  FakeDriver& d = driver();
  std::lock_guard lock(d.mutex);
  auto it = d.deviceBlocks.find(ptr);
  if (it == d.deviceBlocks.end()) return CUDA_ERROR_INVALID_VALUE;
  if (auto pooled = d.poolBlocks.find(ptr); pooled != d.poolBlocks.end()) {
    FakePool* pool = pooled->second;
    pool->used -= it->second;
    if (!observed) pool->unobservedFrees[stream] += it->second;
    d.poolBlocks.erase(pooled);
  }
  d.deviceBytesInUse -= it->second;
  d.deviceBlocks.erase(it);
  std::free(reinterpret_cast<void*>(ptr));
  return CUDA_SUCCESS;
}

// Rows of `width` bytes `height` times, each side advancing by its own pitch.
void copyRows(char* dst, size_t dstPitch, const char* src, size_t srcPitch, size_t width, size_t height) {
  for (size_t row = 0; row < height; ++row) std::memmove(dst + row * dstPitch, src + row * srcPitch, width);
}

template <typename T>
void fillRows(CUdeviceptr dst, size_t pitch, T value, size_t width, size_t height) {
  for (size_t row = 0; row < height; ++row) {
    T* p = reinterpret_cast<T*>(dst + row * pitch);
    std::fill(p, p + width, value);
  }
}

template <typename T>
CUresult memset2D(CUdeviceptr dst, size_t pitch, T value, size_t width, size_t height, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (height > 1 && pitch < width * sizeof(T)) return CUDA_ERROR_INVALID_VALUE;
  // As the driver: 16- and 32-bit memsets need every row aligned to their element.
  if (dst % sizeof(T) != 0 || (height > 1 && pitch % sizeof(T) != 0)) return CUDA_ERROR_INVALID_VALUE;
  return onStream(s, CU_GRAPH_NODE_TYPE_MEMSET, [=] {
    fillRows(dst, pitch, value, width, height);
    return CUDA_SUCCESS;
  });
}

// Both host and device addresses are plain host addresses here.
const char* sourceOf(const CUDA_MEMCPY2D* p) {
  const char* base = p->srcMemoryType == CU_MEMORYTYPE_HOST ? static_cast<const char*>(p->srcHost)
                                                             : reinterpret_cast<const char*>(p->srcDevice);
  return base + p->srcY * p->srcPitch + p->srcXInBytes;
}

char* destinationOf(const CUDA_MEMCPY2D* p) {
  char* base = p->dstMemoryType == CU_MEMORYTYPE_HOST ? static_cast<char*>(p->dstHost)
                                                       : reinterpret_cast<char*>(p->dstDevice);
  return base + p->dstY * p->dstPitch + p->dstXInBytes;
}

// A function's parameters, derived from its name so every module has a few shapes of kernel:
// (name length % 5) parameters, alternately 8 and 4 bytes, naturally aligned.
bool paramInfo(const FakeFunction& f, size_t index, size_t& offset, size_t& size) {
  size_t count = f.name.size() % 5;
  if (index >= count) return false;
  offset = 0;
  for (size_t i = 0;; ++i) {
    size = i % 2 == 0 ? 8 : 4;
    offset = (offset + size - 1) / size * size;
    if (i == index) return true;
    offset += size;
  }
}

// What the real driver does first at a launch: copy each parameter value.
CUresult readParams(CUfunction fn, void** params) {
  auto* f = reinterpret_cast<FakeFunction*>(fn);
  if (!live(f) || !live(f->module)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned char scratch[8];
  size_t offset = 0, size = 0;
  for (size_t i = 0; paramInfo(*f, i, offset, size); ++i) {
    if (params == nullptr || params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(scratch, params[i], size);
  }
  return CUDA_SUCCESS;
}

// The graph `s` captures into, or nullptr (also for the null and per-thread streams).
FakeGraph* captureOf(CUstream s) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return nullptr;
  return reinterpret_cast<FakeStream*>(s)->capture;
}

FakeNode& addNode(FakeGraph& g, CUgraphNodeType type) {
  g.nodes.push_back(std::make_unique<FakeNode>());
  FakeNode& n = *g.nodes.back();
  n.graph = &g;
  n.type = type;
  return n;
}

// Work on `s`: done now, or recorded into the graph the stream captures into.
CUresult onStream(CUstream s, CUgraphNodeType type, std::function<CUresult()> work) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (FakeGraph* g = captureOf(s); g != nullptr) {
    addNode(*g, type).work = std::move(work);
    return CUDA_SUCCESS;
  }
  return work();
}

// Kernel node parameters: a copy of each, at the sizes the function declares.
CUresult setKernel(FakeNode& n, CUfunction fn, const unsigned grid[3], const unsigned block[3], unsigned sharedMem,
                   void** params) {
  if (CUresult r = readParams(fn, params); r != CUDA_SUCCESS) return r;
  auto* f = reinterpret_cast<FakeFunction*>(fn);
  n.function = fn;
  std::copy(grid, grid + 3, n.grid);
  std::copy(block, block + 3, n.block);
  n.sharedMem = sharedMem;
  n.params.clear();
  size_t offset = 0, size = 0;
  for (size_t i = 0; paramInfo(*f, i, offset, size); ++i) {
    const auto* p = static_cast<const unsigned char*>(params[i]);
    n.params.emplace_back(p, p + size);
  }
  n.paramPointers.clear();
  for (auto& p : n.params) n.paramPointers.push_back(p.data());
  return CUDA_SUCCESS;
}

// What a kernel does here: an "add" kernel adds 1 to the u32 its first parameter points at.
void runKernel(CUfunction fn, void** params) {
  auto* f = reinterpret_cast<FakeFunction*>(fn);
  if (f->name.rfind("add", 0) != 0 || params == nullptr || params[0] == nullptr) return;
  uint32_t* counter = nullptr;
  std::memcpy(&counter, params[0], sizeof(counter));
  FakeDriver& d = driver();
  std::lock_guard lock(d.mutex);
  auto block = d.deviceBlocks.upper_bound(reinterpret_cast<uintptr_t>(counter));
  if (block == d.deviceBlocks.begin()) return;
  --block;
  if (reinterpret_cast<uintptr_t>(counter) + sizeof(uint32_t) <= block->first + block->second) ++*counter;
}

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned sharedMem, CUstream s, void** params) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t(bx) * by * bz > 1024 || sharedMem > (227u << 10)) return CUDA_ERROR_INVALID_VALUE;
  if (FakeGraph* g = captureOf(s); g != nullptr) {
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    FakeNode n;
    if (CUresult r = setKernel(n, f, grid, block, sharedMem, params); r != CUDA_SUCCESS) return r;
    FakeNode& added = addNode(*g, CU_GRAPH_NODE_TYPE_KERNEL);
    added.function = n.function;
    std::copy(n.grid, n.grid + 3, added.grid);
    std::copy(n.block, n.block + 3, added.block);
    added.sharedMem = n.sharedMem;
    added.params = std::move(n.params);
    for (auto& p : added.params) added.paramPointers.push_back(p.data());
    return CUDA_SUCCESS;
  }
  if (CUresult r = readParams(f, params); r != CUDA_SUCCESS) return r;
  if (reinterpret_cast<FakeFunction*>(f)->name.rfind("fail", 0) == 0) return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  runKernel(f, params);
  return CUDA_SUCCESS;
}

CUresult runNode(FakeNode& n) {
  if (!n.enabled) return CUDA_SUCCESS;
  if (n.type != CU_GRAPH_NODE_TYPE_KERNEL) return n.work ? n.work() : CUDA_SUCCESS;
  if (!live(reinterpret_cast<FakeFunction*>(n.function))) return CUDA_ERROR_INVALID_HANDLE;
  runKernel(n.function, n.paramPointers.data());
  return CUDA_SUCCESS;
}

// A sync or query of a capturing stream: refused, and the capture invalidated.
CUresult refuseIfCapturing(CUstream s) {
  FakeGraph* g = captureOf(s);
  if (g == nullptr) return CUDA_SUCCESS;
  g->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// Device attributes of an H200-like GPU; the ones handlers look at, the rest 0.
int deviceAttribute(CUdevice_attribute a) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 0x7fffffff;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 48 << 10;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 227 << 10;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR: return 1;
    default: return 0;
  }
}

}  // namespace

extern "C" {

// --- initialization, devices, contexts ---
CUresult CUDAAPI cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* count) {
  *count = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::snprintf(name, static_cast<size_t>(len), "%s", "Tally fake GPU (host memory)");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice) {
  *value = deviceAttribute(attribute);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = kDeviceBytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice) {
  std::memset(uuid->bytes, 0xfa, sizeof(uuid->bytes));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice) {
  static FakeContext* primary = new FakeContext;
  *context = reinterpret_cast<CUcontext>(primary);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext context) {
  return context == nullptr || live(reinterpret_cast<FakeContext*>(context)) ? CUDA_SUCCESS
                                                                              : CUDA_ERROR_INVALID_CONTEXT;
}
CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxGetLimit(size_t* value, CUlimit limit) {
  if (value == nullptr || limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver().mutex);
  auto it = driver().limits.find(limit);
  *value = it != driver().limits.end() ? it->second : 1024;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  if (limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(driver().mutex);
  driver().limits[limit] = value;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorName(CUresult, const char** name) {
  *name = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGetErrorString(CUresult, const char** text) {
  *text = "error of the fake GPU";
  return CUDA_SUCCESS;
}

// --- device memory ---
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) { return allocateDevice(ptr, bytes); }
CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height, unsigned elementSize) {
  if (pitch == nullptr || width == 0 || height == 0 || (elementSize != 4 && elementSize != 8 && elementSize != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (width > kDeviceBytes || height > kDeviceBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t aligned = (width + kPitchAlignment - 1) / kPitchAlignment * kPitchAlignment;
  if (height > kDeviceBytes / aligned) return CUDA_ERROR_OUT_OF_MEMORY;
  *pitch = aligned;
  return allocateDevice(ptr, aligned * height);
}
CUresult CUDAAPI cuMemFree_v2(CUdeviceptr ptr) { return freeDevice(ptr); }
CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  std::lock_guard lock(driver().mutex);
  *free = kDeviceBytes - driver().deviceBytesInUse;
  *total = kDeviceBytes;
  return CUDA_SUCCESS;
}

// Memory pools (FakePool); their blocks are ordinary device blocks.
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps*) {
  auto* p = new FakePool;
  std::lock_guard lock(driver().mutex);
  driver().pools.push_back(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  auto* p = reinterpret_cast<FakePool*>(pool);
  if (!live(p)) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard lock(driver().mutex);
    std::erase(driver().pools, p);
    std::erase_if(driver().poolBlocks, [p](const auto& block) { return block.second == p; });
  }
  return destroy(p);
}
CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void*) {
  auto* p = reinterpret_cast<FakePool*>(pool);
  if (!live(p)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(driver().mutex);
  if (attribute == CU_MEMPOOL_ATTR_USED_MEM_HIGH) p->usedHigh = p->used;  // the driver's reset
  if (attribute == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) p->reservedHigh = p->reserved;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  auto* p = reinterpret_cast<FakePool*>(pool);
  if (!live(p) || value == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(driver().mutex);
  switch (attribute) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *static_cast<int*>(value) = 0; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = p->reservedHigh; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = p->usedHigh; break;
    default: *static_cast<cuuint64_t*>(value) = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  auto* p = reinterpret_cast<FakePool*>(pool);
  if (!live(p)) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(driver().mutex);
  if (p->reserved > keep) p->reserved = std::max(keep, p->outstanding());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  auto* p = reinterpret_cast<FakePool*>(pool);
  if (!live(p)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (CUresult r = allocateDevice(ptr, bytes); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(driver().mutex);
  driver().poolBlocks[*ptr] = p;
  p->used += bytes;
  p->reserved = std::max(p->reserved, p->outstanding());
  p->usedHigh = std::max(p->usedHigh, p->used);
  p->reservedHigh = std::max(p->reservedHigh, p->reserved);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr ptr, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return freeDevice(ptr, s, false);
}

// --- pinned host memory ---
CUresult CUDAAPI cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (bytes > kHostAllocLimit) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = std::malloc(bytes);
  return *p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuMemFreeHost(void* p) {
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytes, unsigned int) {
  return p != nullptr && bytes != 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI cuMemHostUnregister(void* p) { return p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }
// Mapped host memory has the same address on the "device".
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* device, void* host, unsigned int) {
  *device = reinterpret_cast<CUdeviceptr>(host);
  return CUDA_SUCCESS;
}

// --- copies and memsets (done at once, on host memory) ---
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (p->Height > 1 && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return onStream(s, CU_GRAPH_NODE_TYPE_MEMCPY, [dst = destinationOf(p), src = sourceOf(p), copy = *p] {
    copyRows(dst, copy.dstPitch, src, copy.srcPitch, copy.WidthInBytes, copy.Height);
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return onStream(s, CU_GRAPH_NODE_TYPE_MEMCPY, [=] {
    std::memmove(reinterpret_cast<void*>(dst), src, bytes);
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return onStream(s, CU_GRAPH_NODE_TYPE_MEMCPY, [=] {
    std::memmove(dst, reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  return onStream(s, CU_GRAPH_NODE_TYPE_MEMCPY, [=] {
    std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return memset2D<uint8_t>(dst, n, v, n, 1, s);
}
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s) {
  return memset2D<uint16_t>(dst, n * 2, v, n, 1, s);
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  return memset2D<uint32_t>(dst, n * 4, v, n, 1, s);
}
CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s) {
  return memset2D<uint8_t>(dst, pitch, v, w, h, s);
}
CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s) {
  return memset2D<uint16_t>(dst, pitch, v, w, h, s);
}
CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
  return memset2D<uint32_t>(dst, pitch, v, w, h, s);
}

// --- streams and events (everything has completed already) ---
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* s, unsigned int, int) {
  *s = reinterpret_cast<CUstream>(new FakeStream);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy_v2(CUstream s) {
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto* stream = reinterpret_cast<FakeStream*>(s);
  if (live(stream) && stream->capture != nullptr) std::erase(stream->capture->joined, stream);
  return destroy(stream);
}
// A synchronize shows the host that the stream's frees completed (FakePool).
CUresult CUDAAPI cuStreamSynchronize(CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (CUresult r = refuseIfCapturing(s); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(driver().mutex);
  for (FakePool* p : driver().pools) p->unobservedFrees.erase(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamQuery(CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return refuseIfCapturing(s);
}
// A wait on an event recorded in a capture pulls the stream into that capture.
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<FakeEvent*>(e);
  if (!live(event)) return CUDA_ERROR_INVALID_HANDLE;
  FakeGraph* g = event->capturedIn;
  if (g == nullptr || !live(g) || captureOf(s) != nullptr || s == nullptr || s == CU_STREAM_LEGACY ||
      s == CU_STREAM_PER_THREAD) {
    return CUDA_SUCCESS;
  }
  reinterpret_cast<FakeStream*>(s)->capture = g;
  g->joined.push_back(reinterpret_cast<FakeStream*>(s));
  return CUDA_SUCCESS;
}
// Stream memory operations touch the word now: a word in a mapping the client shrank or
// unmapped faults here as it would on the GPU's DMA.
CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (addr % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  return onStream(s, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [=] {
    *reinterpret_cast<volatile cuuint32_t*>(addr) = value;
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (addr % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  return onStream(s, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [=] {
    [[maybe_unused]] cuuint32_t seen = *reinterpret_cast<volatile cuuint32_t*>(addr);
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (addr % 8 != 0) return CUDA_ERROR_INVALID_VALUE;
  return onStream(s, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [=] {
    *reinterpret_cast<volatile cuuint64_t*>(addr) = value;
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (addr % 8 != 0) return CUDA_ERROR_INVALID_VALUE;
  return onStream(s, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [=] {
    [[maybe_unused]] cuuint64_t seen = *reinterpret_cast<volatile cuuint64_t*>(addr);
    return CUDA_SUCCESS;
  });
}
// Each operation as its own function does it, after all are checked (a refused batch runs none).
CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream s, unsigned int count, CUstreamBatchMemOpParams* ops, unsigned int flags) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (flags != 0 || count == 0 || count > 255 || ops == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32: if (op.waitValue.address % 4 != 0) return CUDA_ERROR_INVALID_VALUE; break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: if (op.waitValue.address % 8 != 0) return CUDA_ERROR_INVALID_VALUE; break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32: if (op.writeValue.address % 4 != 0) return CUDA_ERROR_INVALID_VALUE; break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: if (op.writeValue.address % 8 != 0) return CUDA_ERROR_INVALID_VALUE; break;
      case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES: case CU_STREAM_MEM_OP_BARRIER: break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& op = ops[i];
    CUresult r = CUDA_SUCCESS;
    switch (op.operation) {
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
        r = cuStreamWaitValue32_v2(s, op.waitValue.address, op.waitValue.value, op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WAIT_VALUE_64:
        r = cuStreamWaitValue64_v2(s, op.waitValue.address, op.waitValue.value64, op.waitValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
        r = cuStreamWriteValue32_v2(s, op.writeValue.address, op.writeValue.value, op.writeValue.flags);
        break;
      case CU_STREAM_MEM_OP_WRITE_VALUE_64:
        r = cuStreamWriteValue64_v2(s, op.writeValue.address, op.writeValue.value64, op.writeValue.flags);
        break;
      default: break;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(new FakeEvent);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent e) { return destroy(reinterpret_cast<FakeEvent*>(e)); }
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  auto* event = reinterpret_cast<FakeEvent*>(e);
  if (!live(event)) return CUDA_ERROR_INVALID_HANDLE;
  event->capturedIn = captureOf(s);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventQuery(CUevent e) {
  auto* event = reinterpret_cast<FakeEvent*>(e);
  if (!live(event)) return CUDA_ERROR_INVALID_HANDLE;
  return event->capturedIn != nullptr ? CUDA_ERROR_CAPTURED_EVENT : CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventSynchronize(CUevent e) { return cuEventQuery(e); }
CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (!live(reinterpret_cast<FakeEvent*>(start)) || !live(reinterpret_cast<FakeEvent*>(end))) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *ms = 0.0f;
  return CUDA_SUCCESS;
}

// --- modules, functions, globals ---
CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(new FakeModule);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  auto* m = reinterpret_cast<FakeModule*>(module);
  if (!live(m)) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& [name, f] : m->functions) f->magic = 0;
  for (auto& [name, g] : m->globals) std::free(g);
  return destroy(m);
}
// Names that start with "missing" are not in any module.
CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  auto* m = reinterpret_cast<FakeModule*>(module);
  if (!live(m) || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (std::strncmp(name, "missing", 7) == 0) return CUDA_ERROR_NOT_FOUND;
  auto& f = m->functions[name];
  if (!f) {
    f = std::make_unique<FakeFunction>();
    f->module = m;
    f->name = name;
  }
  *function = reinterpret_cast<CUfunction>(f.get());
  return CUDA_SUCCESS;
}
// A global's size also comes from its name: 1 + (length * 13) % 256 bytes.
CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* ptr, size_t* bytes, CUmodule module, const char* name) {
  auto* m = reinterpret_cast<FakeModule*>(module);
  if (!live(m) || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (std::strncmp(name, "missing", 7) == 0) return CUDA_ERROR_NOT_FOUND;
  size_t size = 1 + (std::strlen(name) * 13) % 256;
  void*& g = m->globals[name];
  if (g == nullptr) g = std::calloc(1, size);
  if (ptr != nullptr) *ptr = reinterpret_cast<CUdeviceptr>(g);
  if (bytes != nullptr) *bytes = size;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction function, size_t index, size_t* offset, size_t* size) {
  auto* f = reinterpret_cast<FakeFunction*>(function);
  if (!live(f)) return CUDA_ERROR_INVALID_HANDLE;
  size_t o = 0, s = 0;
  if (!paramInfo(*f, index, o, s)) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = o;
  if (size != nullptr) *size = s;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  auto* f = reinterpret_cast<FakeFunction*>(function);
  if (!live(f)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = f->attributes.find(attribute);
  *value = it != f->attributes.end() ? it->second : (attribute == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  auto* f = reinterpret_cast<FakeFunction*>(function);
  if (!live(f)) return CUDA_ERROR_INVALID_HANDLE;
  if (attribute < 0 || attribute >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  f->attributes[attribute] = value;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function, int blockSize, size_t) {
  if (!live(reinterpret_cast<FakeFunction*>(function))) return CUDA_ERROR_INVALID_HANDLE;
  *blocks = blockSize > 0 ? std::max(1, 2048 / blockSize) : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction function, int blockSize,
                                                                      size_t smem, unsigned int) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, function, blockSize, smem);
}
CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* smem, CUfunction function, int, int) {
  if (!live(reinterpret_cast<FakeFunction*>(function))) return CUDA_ERROR_INVALID_HANDLE;
  *smem = 48 << 10;
  return CUDA_SUCCESS;
}

// --- launches ---
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned sharedMem, CUstream s, void** params, void** extra) {
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return launch(f, gx, gy, gz, bx, by, bz, sharedMem, s, params);
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (config == nullptr || extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  // The attributes are read as the driver reads them.
  bool programmatic = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id > kLastLaunchAttribute) return CUDA_ERROR_INVALID_VALUE;
    programmatic = programmatic || (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION &&
                                    a.value.programmaticStreamSerializationAllowed != 0);
  }
  CUresult r = launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                      config->blockDimZ, config->sharedMemBytes, config->hStream, params);
  if (r == CUDA_SUCCESS && programmatic) programmaticLaunches.fetch_add(1);
  return r;
}

// --- stream capture and graphs ---
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  if (s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  auto* stream = reinterpret_cast<FakeStream*>(s);
  if (stream->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  stream->capture = new FakeGraph;
  stream->capture->captureId = nextCaptureId++;
  stream->origin = true;
  ++liveGraphs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* out) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  FakeGraph* g = captureOf(s);
  if (g == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  auto* stream = reinterpret_cast<FakeStream*>(s);
  if (!stream->origin) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  for (FakeStream* joined : g->joined) joined->capture = nullptr;
  stream->capture = nullptr;
  stream->origin = false;
  *out = nullptr;
  if (g->invalidated) {
    --liveGraphs;
    destroy(g);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  g->joined.clear();
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  FakeGraph* g = captureOf(s);
  *status = g == nullptr ? CU_STREAM_CAPTURE_STATUS_NONE
                         : g->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                           const CUgraphNode** dependencies, const CUgraphEdgeData** edges,
                                           size_t* count) {
  if (CUresult r = cuStreamIsCapturing(s, status); r != CUDA_SUCCESS) return r;
  FakeGraph* g = captureOf(s);
  if (id != nullptr) *id = g != nullptr ? g->captureId : 0;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(g);
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraph>(new FakeGraph);
  ++liveGraphs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g)) return CUDA_ERROR_INVALID_VALUE;
  --liveGraphs;
  return destroy(g);
}
CUresult CUDAAPI cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes != nullptr) {
    for (size_t i = 0; i < *count; ++i) {
      nodes[i] = i < g->nodes.size() ? reinterpret_cast<CUgraphNode>(g->nodes[i].get()) : nullptr;
    }
  }
  *count = nodes != nullptr ? std::min(*count, g->nodes.size()) : g->nodes.size();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(n) || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = n->type;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  *p = CUDA_KERNEL_NODE_PARAMS{};
  p->func = n->function;
  p->gridDimX = n->grid[0], p->gridDimY = n->grid[1], p->gridDimZ = n->grid[2];
  p->blockDimX = n->block[0], p->blockDimY = n->block[1], p->blockDimZ = n->block[2];
  p->sharedMemBytes = n->sharedMem;
  p->kernelParams = n->paramPointers.data();
  return CUDA_SUCCESS;
}
CUresult setKernelParams(FakeNode& n, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr || p->extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return setKernel(n, p->func, grid, block, p->sharedMemBytes, p->kernelParams);
}
CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  return setKernelParams(*n, p);
}
void addEdges(FakeGraph& g, const CUgraphNode* from, size_t count, FakeNode* to) {
  for (size_t i = 0; i < count; ++i) g.edges.emplace_back(reinterpret_cast<FakeNode*>(from[i]), to);
}
// A copy of `n` whose parameter pointers point at its own parameters.
void copyNodeInto(const FakeNode& n, FakeNode& copy) {
  copy = n;
  copy.paramPointers.clear();
  for (auto& param : copy.params) copy.paramPointers.push_back(param.data());
}
// Dependencies must be nodes of the same graph (the fake runs nodes in the order they were added).
bool ownNodes(const FakeGraph& g, const CUgraphNode* nodes, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    auto* n = reinterpret_cast<FakeNode*>(nodes[i]);
    if (!live(n) || n->graph != &g) return false;
  }
  return true;
}
CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                         const CUDA_KERNEL_NODE_PARAMS* p) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || out == nullptr || !ownNodes(*g, deps, count)) return CUDA_ERROR_INVALID_VALUE;
  FakeNode n;
  if (CUresult r = setKernelParams(n, p); r != CUDA_SUCCESS) return r;
  FakeNode& added = addNode(*g, CU_GRAPH_NODE_TYPE_KERNEL);
  added.function = n.function;
  std::copy(n.grid, n.grid + 3, added.grid);
  std::copy(n.block, n.block + 3, added.block);
  added.sharedMem = n.sharedMem;
  added.params = std::move(n.params);
  for (auto& param : added.params) added.paramPointers.push_back(param.data());
  addEdges(*g, deps, count, &added);
  *out = reinterpret_cast<CUgraphNode>(&added);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                      const CUDA_MEMCPY3D* p, CUcontext) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || out == nullptr || p == nullptr || !ownNodes(*g, deps, count) || p->Depth > 1) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FakeNode& added = addNode(*g, CU_GRAPH_NODE_TYPE_MEMCPY);
  auto* dst = reinterpret_cast<char*>(p->dstDevice + p->dstY * p->dstPitch + p->dstXInBytes);
  auto* src = reinterpret_cast<const char*>(p->srcDevice + p->srcY * p->srcPitch + p->srcXInBytes);
  added.work = [dst, src, copy = *p] {
    copyRows(dst, copy.dstPitch, src, copy.srcPitch, copy.WidthInBytes, std::max<size_t>(copy.Height, 1));
    return CUDA_SUCCESS;
  };
  addEdges(*g, deps, count, &added);
  *out = reinterpret_cast<CUgraphNode>(&added);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                           const CUgraphEdgeData*, size_t count) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || !ownNodes(*g, from, count) || !ownNodes(*g, to, count)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) addEdges(*g, &from[i], 1, reinterpret_cast<FakeNode*>(to[i]));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long flags) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || out == nullptr || flags > 15) return CUDA_ERROR_INVALID_VALUE;
  auto* e = new FakeExec;
  e->source = g;
  for (auto& n : g->nodes) copyNodeInto(*n, e->nodes.emplace_back());
  ++liveGraphs;
  *out = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec exec) {
  auto* e = reinterpret_cast<FakeExec*>(exec);
  if (!live(e)) return CUDA_ERROR_INVALID_VALUE;
  --liveGraphs;
  return destroy(e);
}
// The executable graph's copy of `n`, a node of the graph it was instantiated from.
FakeNode* execCopyOf(FakeExec* e, FakeNode* n) {
  if (!live(e) || !live(n) || !live(e->source) || n->graph != e->source) return nullptr;
  for (size_t i = 0; i < e->nodes.size() && i < e->source->nodes.size(); ++i) {
    if (e->source->nodes[i].get() == n) return &e->nodes[i];
  }
  return nullptr;
}
CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_KERNEL_NODE_PARAMS* p) {
  auto* e = reinterpret_cast<FakeExec*>(exec);
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(e) || !live(n) || n->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  FakeNode* copy = execCopyOf(e, n);
  return copy != nullptr ? setKernelParams(*copy, p) : CUDA_ERROR_INVALID_VALUE;
}
// Into a capturing stream a graph launch is captured (as one node); else its nodes run now.
CUresult CUDAAPI cuGraphLaunch(CUgraphExec exec, CUstream s) {
  auto* e = reinterpret_cast<FakeExec*>(exec);
  if (!live(e)) return CUDA_ERROR_INVALID_VALUE;
  return onStream(s, CU_GRAPH_NODE_TYPE_GRAPH, [e] {
    for (FakeNode& n : e->nodes) {
      if (CUresult r = runNode(n); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuGraphUpload(CUgraphExec exec, CUstream s) {
  if (!live(reinterpret_cast<FakeExec*>(exec))) return CUDA_ERROR_INVALID_VALUE;
  return checkStream(s);
}

// A memset node's parameters, and the work each launch redoes with them.
void setMemset(FakeNode& n, const CUDA_MEMSET_NODE_PARAMS& m) {
  n.memset = m;
  n.work = [m] {
    size_t height = std::max<size_t>(m.height, 1);
    if (m.elementSize == 1) fillRows<uint8_t>(m.dst, m.pitch, static_cast<uint8_t>(m.value), m.width, height);
    if (m.elementSize == 2) fillRows<uint16_t>(m.dst, m.pitch, static_cast<uint16_t>(m.value), m.width, height);
    if (m.elementSize == 4) fillRows<uint32_t>(m.dst, m.pitch, m.value, m.width, height);
    return CUDA_SUCCESS;
  };
}
// Nodes without a kernel: `work` (if any) is what each launch redoes.
CUresult addPlainNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, CUgraphNodeType type,
                      std::function<CUresult()> work = {}) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || out == nullptr || !ownNodes(*g, deps, count)) return CUDA_ERROR_INVALID_VALUE;
  FakeNode& added = addNode(*g, type);
  added.work = std::move(work);
  addEdges(*g, deps, count, &added);
  *out = reinterpret_cast<CUgraphNode>(&added);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count) {
  return addPlainNode(out, graph, deps, count, CU_GRAPH_NODE_TYPE_EMPTY);
}
CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                      const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = addPlainNode(out, graph, deps, count, CU_GRAPH_NODE_TYPE_MEMSET);
  if (r == CUDA_SUCCESS) setMemset(*reinterpret_cast<FakeNode*>(*out), *p);
  return r;
}
CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(n) || n->type != CU_GRAPH_NODE_TYPE_MEMSET || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *p = n->memset;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(n) || n->type != CU_GRAPH_NODE_TYPE_MEMSET || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  setMemset(*n, *p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p,
                                                CUcontext) {
  FakeNode* copy = execCopyOf(reinterpret_cast<FakeExec*>(exec), reinterpret_cast<FakeNode*>(node));
  if (copy == nullptr || copy->type != CU_GRAPH_NODE_TYPE_MEMSET || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  setMemset(*copy, *p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int* enabled) {
  FakeNode* copy = execCopyOf(reinterpret_cast<FakeExec*>(exec), reinterpret_cast<FakeNode*>(node));
  if (copy == nullptr || enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *enabled = copy->enabled ? 1 : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  FakeNode* copy = execCopyOf(reinterpret_cast<FakeExec*>(exec), reinterpret_cast<FakeNode*>(node));
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  copy->enabled = enabled != 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                           CUevent event) {
  if (!live(reinterpret_cast<FakeEvent*>(event))) return CUDA_ERROR_INVALID_HANDLE;
  return addPlainNode(out, graph, deps, count, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}
CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                         CUevent event) {
  if (!live(reinterpret_cast<FakeEvent*>(event))) return CUDA_ERROR_INVALID_HANDLE;
  return addPlainNode(out, graph, deps, count, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}
// The node runs a copy of the child's nodes, as of now.
CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                          CUgraph child) {
  auto* c = reinterpret_cast<FakeGraph*>(child);
  if (!live(c) || child == graph) return CUDA_ERROR_INVALID_VALUE;
  auto copies = std::make_shared<std::vector<FakeNode>>();
  for (auto& n : c->nodes) copyNodeInto(*n, copies->emplace_back());
  return addPlainNode(out, graph, deps, count, CU_GRAPH_NODE_TYPE_GRAPH, [copies] {
    for (FakeNode& n : *copies) {
      if (CUresult r = runNode(n); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  });
}
CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data,
                                    size_t* count) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (from == nullptr) {
    *count = g->edges.size();
    return CUDA_SUCCESS;
  }
  *count = std::min(*count, g->edges.size());
  for (size_t i = 0; i < *count; ++i) {
    from[i] = reinterpret_cast<CUgraphNode>(g->edges[i].first);
    to[i] = reinterpret_cast<CUgraphNode>(g->edges[i].second);
    if (data != nullptr) data[i] = CUgraphEdgeData{};
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to,
                                              const CUgraphEdgeData*, size_t count) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  if (!live(g) || !ownNodes(*g, from, count) || !ownNodes(*g, to, count)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    auto edge = std::make_pair(reinterpret_cast<FakeNode*>(from[i]), reinterpret_cast<FakeNode*>(to[i]));
    auto it = std::find(g->edges.begin(), g->edges.end(), edge);
    if (it == g->edges.end()) return CUDA_ERROR_INVALID_VALUE;
    g->edges.erase(it);
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode node) {
  auto* n = reinterpret_cast<FakeNode*>(node);
  if (!live(n)) return CUDA_ERROR_INVALID_VALUE;
  FakeGraph& g = *n->graph;
  std::erase_if(g.edges, [n](const auto& e) { return e.first == n || e.second == n; });
  n->magic = 0;
  std::erase_if(g.nodes, [n](const auto& owned) { return owned.get() == n; });
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphClone(CUgraph* out, CUgraph original) {
  auto* g = reinterpret_cast<FakeGraph*>(original);
  if (!live(g) || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* clone = new FakeGraph;
  ++liveGraphs;
  std::map<const FakeNode*, FakeNode*> copyOf;
  for (auto& n : g->nodes) {
    FakeNode& copy = *clone->nodes.emplace_back(std::make_unique<FakeNode>());
    copyNodeInto(*n, copy);
    copy.graph = clone;
    copy.original = n.get();
    copyOf[n.get()] = &copy;
  }
  for (auto& [from, to] : g->edges) clone->edges.emplace_back(copyOf[from], copyOf[to]);
  *out = reinterpret_cast<CUgraph>(clone);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph cloned) {
  auto* clone = reinterpret_cast<FakeGraph*>(cloned);
  if (!live(clone) || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (auto& n : clone->nodes) {
    if (n->original == reinterpret_cast<FakeNode*>(original)) {
      *out = reinterpret_cast<CUgraphNode>(n.get());
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// For tests: graphs and executable graphs created and not destroyed.
size_t tallyFakeLiveGraphs() { return liveGraphs.load(); }
// For tests: launches made with programmatic stream serialization.
size_t tallyFakeProgrammaticLaunches() { return programmaticLaunches.load(); }

}  // extern "C"
