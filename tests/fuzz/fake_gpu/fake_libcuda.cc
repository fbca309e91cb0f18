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
//  - a kernel launch reads every parameter at the size cuFuncGetParamInfo reported for it, as
//    the real driver copies them, so a short parameter buffer is an overread.
// Exports carry the versioned names the shim resolves (cuMemAlloc_v2, ...), so this file
// includes cuda.h with __CUDA_API_VERSION_INTERNAL like the shim does.
#define __CUDA_API_VERSION_INTERNAL 1
#define __CUDA_API_VERSION_INTERNAL_ODR 1
#include <cuda.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

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

struct FakeStream : FakeObject {};
struct FakeEvent : FakeObject {};
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

struct FakeDriver {
  std::mutex mutex;
  std::map<uintptr_t, size_t> deviceBlocks;  // live cuMemAlloc/pool blocks: address -> size
  size_t deviceBytesInUse = 0;
  std::map<int, size_t> limits;
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

CUresult freeDevice(CUdeviceptr ptr) {
  FakeDriver& d = driver();
  std::lock_guard lock(d.mutex);
  auto it = d.deviceBlocks.find(ptr);
  if (it == d.deviceBlocks.end()) return CUDA_ERROR_INVALID_VALUE;
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
  fillRows(dst, pitch, value, width, height);
  return CUDA_SUCCESS;
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

CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned sharedMem, CUstream s, void** params) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  if (uint64_t(bx) * by * bz > 1024 || sharedMem > (227u << 10)) return CUDA_ERROR_INVALID_VALUE;
  return readParams(f, params);
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

// Memory pools: one fake pool object; its blocks are ordinary device blocks.
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps*) {
  *pool = reinterpret_cast<CUmemoryPool>(new FakeObject);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) { return destroy(reinterpret_cast<FakeObject*>(pool)); }
CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute, void*) {
  return live(reinterpret_cast<FakeObject*>(pool)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  if (!live(reinterpret_cast<FakeObject*>(pool))) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard lock(driver().mutex);
  bool sizeAttribute = attribute == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || attribute == CU_MEMPOOL_ATTR_USED_MEM_CURRENT;
  *static_cast<cuuint64_t*>(value) = sizeAttribute ? driver().deviceBytesInUse : 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t) {
  return live(reinterpret_cast<FakeObject*>(pool)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t bytes, CUmemoryPool pool, CUstream s) {
  if (!live(reinterpret_cast<FakeObject*>(pool))) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return allocateDevice(ptr, bytes);
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr ptr, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return freeDevice(ptr);
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
  copyRows(destinationOf(p), p->dstPitch, sourceOf(p), p->srcPitch, p->WidthInBytes, p->Height);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  std::memmove(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
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
  return destroy(reinterpret_cast<FakeStream*>(s));
}
CUresult CUDAAPI cuStreamSynchronize(CUstream s) { return checkStream(s); }
CUresult CUDAAPI cuStreamQuery(CUstream s) { return checkStream(s); }
CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return live(reinterpret_cast<FakeEvent*>(e)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
// Stream memory operations touch the word now: a word in a mapping the client shrank or
// unmapped faults here as it would on the GPU's DMA.
CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (addr % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  *reinterpret_cast<volatile cuuint32_t*>(addr) = value;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t, unsigned int) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  if (addr % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  [[maybe_unused]] cuuint32_t seen = *reinterpret_cast<volatile cuuint32_t*>(addr);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(new FakeEvent);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent e) { return destroy(reinterpret_cast<FakeEvent*>(e)); }
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) {
  if (CUresult r = checkStream(s); r != CUDA_SUCCESS) return r;
  return live(reinterpret_cast<FakeEvent*>(e)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuEventQuery(CUevent e) {
  return live(reinterpret_cast<FakeEvent*>(e)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
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
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id > kLastLaunchAttribute) return CUDA_ERROR_INVALID_VALUE;
  }
  return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                config->blockDimZ, config->sharedMemBytes, config->hStream, params);
}

}  // extern "C"
