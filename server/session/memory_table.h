// The device memory one tenant may name: its allocations and the globals of its modules, with
// the GPU each lies on. Every address a call names is checked here (ownerOf), so a tenant can
// reach only its own memory. Pure bookkeeping (no driver calls): the Tenant allocates and frees,
// this table remembers, counts against the quota, and answers who owns what.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

class MemoryTable {
 public:
  struct Range {
    size_t size = 0;
    gpu::Gpu* gpu = nullptr;
    bool allocation = true;  // false: a module global, which goes with its module
    uint64_t module = 0;     // for a global: the client's handle of its module
  };

  // `quotaBytes` 0 = unlimited; `published` receives allocatedBytes() after every change
  // (tallyctl and the metrics read it from another thread).
  MemoryTable(uint64_t quotaBytes, std::string tenant, std::atomic<uint64_t>& published)
      : quotaBytes_(quotaBytes), tenant_(std::move(tenant)), published_(published) {}

  // True if `request` more bytes keep the tenant within its quota (logged once when not).
  bool quotaAllows(size_t request);
  void addAllocation(CUdeviceptr ptr, size_t size, gpu::Gpu* g);
  // Forgets the allocation that starts at `ptr` and returns it; nullopt if there is none
  // (an unknown address, an interior pointer, or a module global).
  std::optional<Range> takeAllocation(CUdeviceptr ptr);
  void addGlobal(CUdeviceptr ptr, size_t size, gpu::Gpu* g, uint64_t module);
  // The module is unloaded: its globals are no longer the tenant's (a pooled instance may go to
  // another tenant next). Forgets them and returns them (address, range).
  std::vector<std::pair<CUdeviceptr, Range>> takeGlobalsOf(uint64_t module);
  // Forgets every range, allocations and globals, and returns them: the end of the tenancy.
  std::vector<std::pair<CUdeviceptr, Range>> takeAll();

  // The GPU whose memory holds [ptr, ptr+size) if the tenant owns all of it, else nullptr.
  gpu::Gpu* ownerOf(CUdeviceptr ptr, size_t size) const;
  size_t allocatedBytes() const { return allocatedBytes_; }
  size_t rangeCount() const { return ranges_.size(); }

 private:
  void publish() { published_.store(allocatedBytes_, std::memory_order_relaxed); }

  uint64_t quotaBytes_;
  std::string tenant_;
  std::atomic<uint64_t>& published_;
  bool quotaLogged_ = false;
  std::map<CUdeviceptr, Range> ranges_;
  size_t allocatedBytes_ = 0;
};

}  // namespace tally::server::session
