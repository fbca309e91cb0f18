// CUDA IPC between tenants of one tallyd. Every tenant runs in the same context, so a device
// address means the same memory to all of them and no driver IPC is needed: "opening" a handle
// only records that the receiving tenant may use a range it does not own (MemoryTable imports).
// What makes this safe is the handle: 64 random bytes naming one grant of one owner, unguessable
// and meaningful only inside this tallyd. A memory grant dies with the owner's allocation (free
// or disconnect): its `live` flag drops and every receiver loses the range at once, without the
// owner's thread touching the receivers' tables (each Tenant is its session thread's alone).
#pragma once

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

inline constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t), sizeof(cudaIpcEventHandle_t)
using IpcHandleBytes = std::array<uint8_t, kIpcHandleBytes>;

// One allocation of `owner`, as cudaIpcGetMemHandle exported it.
struct IpcMemoryGrant {
  uint64_t owner = 0;
  CUdeviceptr base = 0;
  size_t size = 0;
  gpu::Gpu* gpu = nullptr;
  IpcHandleBytes handle{};
  std::atomic<bool> live{true};  // false once the owner freed the allocation or left
};

// One event of `owner`, as cudaIpcGetEventHandle exported it. The driver event is shared: it
// goes when the owner and every receiver have destroyed theirs.
struct IpcEventGrant {
  uint64_t owner = 0;
  gpu::Gpu* gpu = nullptr;
  std::shared_ptr<CUevent_st> event;
  IpcHandleBytes handle{};
};

// Handles to grants, for every tenant of this tallyd. Holds grants weakly: a grant lives as long
// as its owner's allocation or event (and the receivers that opened it); thread-safe.
class IpcRegistry {
 public:
  // Gives `grant` a fresh random handle (grant->handle) and lists it.
  void publish(const std::shared_ptr<IpcMemoryGrant>& grant);
  void publish(const std::shared_ptr<IpcEventGrant>& grant);
  // The live grant `handle` names, or nullptr (unknown, malformed, revoked, or gone).
  std::shared_ptr<IpcMemoryGrant> memory(std::span<const uint8_t> handle);
  std::shared_ptr<IpcEventGrant> event(std::span<const uint8_t> handle);
  size_t size();

 private:
  static IpcHandleBytes randomHandle();
  void purgeExpired();

  std::mutex mutex_;
  std::unordered_map<std::string, std::weak_ptr<IpcMemoryGrant>> memory_;
  std::unordered_map<std::string, std::weak_ptr<IpcEventGrant>> events_;
};

}  // namespace tally::server::session
