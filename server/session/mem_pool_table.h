// One tenant's memory pools (the stream-ordered allocator): its default pool per device,
// created on first use, and the pools it created. Every pool is the tenant's own, so the
// attributes it sets (release threshold, reuse rules) and the statistics it reads (reserved and
// used memory) are its own, as in a process of its own, and no other tenant's allocation ever
// waits on this tenant's streams through a pool. Bookkeeping only; the handlers create and
// destroy the driver pools.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

// Pool ids below this are default pools: id d + 1 is the default pool of device d.
inline constexpr uint64_t kFirstUserPool = 1u << 16;

class MemPoolTable {
 public:
  struct Pool {
    CUmemoryPool pool = nullptr;
    gpu::Gpu* gpu = nullptr;
  };

  static bool isDefault(uint64_t id) { return id != 0 && id < kFirstUserPool; }
  Pool* find(uint64_t id) {
    auto it = pools_.find(id);
    return it == pools_.end() ? nullptr : &it->second;
  }
  // CUDA_ERROR_INVALID_VALUE for a default pool's id or one in use.
  CUresult admit(uint64_t id) const {
    return id < kFirstUserPool || pools_.count(id) != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
  }
  void add(uint64_t id, Pool p) { pools_.emplace(id, p); }
  // A created pool, forgotten; a default pool is never taken (cudaMemPoolDestroy refuses it).
  std::optional<Pool> take(uint64_t id) {
    auto it = pools_.find(id);
    if (it == pools_.end() || isDefault(id)) return std::nullopt;
    Pool p = it->second;
    pools_.erase(it);
    return p;
  }
  std::vector<Pool> takeAll() {
    std::vector<Pool> all;
    for (auto& [id, p] : pools_) all.push_back(p);
    pools_.clear();
    return all;
  }
  size_t size() const { return pools_.size(); }

 private:
  std::unordered_map<uint64_t, Pool> pools_;
};

}  // namespace tally::server::session
