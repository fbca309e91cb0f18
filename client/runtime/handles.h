// Client-side objects behind the opaque handles the application holds. Every handle we give
// out points at one of these and is listed in the HandleRegistry until it is destroyed, so
// entry points reject pointers that are not ours (or no longer are) without touching them.
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tally::client {

inline constexpr int kMaxDevices = 16;

enum class HandleMagic : uint32_t {
  kStream = 0x7a11a501,
  kEvent = 0x7a11a502,
  kModule = 0x7a11a503,
  kFunction = 0x7a11a504,
  kKernel = 0x7a11a505,
  kMemPool = 0x7a11a506,  // client/api/memory_pool.cc
  kLink = 0x7a11a507,     // client/api/jit_link.cc
  kArray = 0x7a11a508,    // client/api/array.cc
  kMipmappedArray = 0x7a11a509,
  kGraph = 0x7a11a5c1,      // client/api/graph.cc
  kGraphExec = 0x7a11a5c2,
  kGraphNode = 0x7a11a5c3,
};

struct StreamHandle {
  HandleMagic magic = HandleMagic::kStream;
  uint64_t id = 0;
  uint32_t device = 0;
  unsigned flags = 0;
  int priority = 0;
};

struct EventHandle {
  HandleMagic magic = HandleMagic::kEvent;
  uint64_t id = 0;
  uint32_t device = 0;
  unsigned flags = 0;
};

// A memory pool (cudaMemPool_t / CUmemoryPool). Id d + 1 is the default pool of device d.
struct MemPoolHandle {
  HandleMagic magic = HandleMagic::kMemPool;
  uint64_t id = 0;
  uint32_t device = 0;
};

struct ModuleHandle;

struct FunctionHandle {
  HandleMagic magic = HandleMagic::kFunction;
  uint64_t id = 0;
  ModuleHandle* module = nullptr;
  std::string name;
  std::vector<std::pair<uint32_t, uint32_t>> params;  // (offset, size)
  size_t paramBytes = 0;
  std::vector<int> attributes;                        // index = CUfunction_attribute
};

struct ModuleHandle {
  HandleMagic magic = HandleMagic::kModule;
  uint64_t id = 0;  // 0: a library with no code for its device (nothing in tallyd)
  uint32_t device = 0;
  std::mutex mutex;
  std::vector<FunctionHandle*> functions;  // owned; looked up by name
};

// One __cudaRegisterFatBinary: loaded lazily, per device, on first use of one of its kernels.
struct FatbinRecord {
  const void* wrapper = nullptr;
  std::mutex mutex;
  std::array<ModuleHandle*, kMaxDevices> modules{};
};

// One __cudaRegisterFunction; also what __cudaGetKernel hands out as cudaKernel_t.
struct KernelRecord {
  HandleMagic magic = HandleMagic::kKernel;
  FatbinRecord* fatbin = nullptr;
  const char* deviceName = nullptr;
  const void* hostFunction = nullptr;
  std::array<std::atomic<FunctionHandle*>, kMaxDevices> functions{};
};

// One __cudaRegisterVar.
struct VariableRecord {
  FatbinRecord* fatbin = nullptr;
  const char* deviceName = nullptr;
  size_t size = 0;
  std::array<CUdeviceptr, kMaxDevices> addresses{};
};

// The handles this process gave out and has not destroyed. An entry point looks a handle up
// here before dereferencing it: a made-up, stale or wrongly typed pointer from the application
// gets CUDA_ERROR_INVALID_HANDLE instead of a crash or a read of freed memory.
class HandleRegistry {
 public:
  void add(const void* handle, HandleMagic kind) {
    std::unique_lock lock(mutex_);
    live_[handle] = kind;
  }
  void remove(const void* handle) {
    std::unique_lock lock(mutex_);
    live_.erase(handle);
  }
  bool contains(const void* handle, HandleMagic kind) const {
    std::shared_lock lock(mutex_);
    auto it = live_.find(handle);
    return it != live_.end() && it->second == kind;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<const void*, HandleMagic> live_;
};

inline HandleRegistry& handleRegistry() {
  static auto* registry = new HandleRegistry();  // never destroyed: app threads may call CUDA during exit
  return *registry;
}

template <typename T>
void registerHandle(T* handle) {
  handleRegistry().add(handle, handle->magic);
}

template <typename T>
T* checkedHandle(const void* p, HandleMagic magic) {
  return handleRegistry().contains(p, magic) ? static_cast<T*>(const_cast<void*>(p)) : nullptr;
}

}  // namespace tally::client
