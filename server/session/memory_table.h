// The device memory one tenant may name: its allocations, the globals of its modules, the mapped
// pieces of its virtual address reservations (cuMemMap) and the ranges other tenants shared with
// it by IPC (imports: usable, never owned), with the GPU each lies on. Every address a call names is checked here (ownerOf), so a tenant can
// reach only its own memory. Pure bookkeeping (no driver calls): the Tenant allocates and frees,
// this table remembers, counts against the quota, and answers who owns what.
#pragma once

#include "server/session/ipc_registry.h"

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
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
    // A mapped piece of a reservation (virtual_memory_table.h): not freed by cudaFree, and its
    // quota is carried by the allocation handle mapped there (charge()). Adjacent mappings
    // form one usable range, as natively.
    bool mapping = false;
    // Set once the owner exported the allocation (cudaIpcGetMemHandle); revoked when it goes.
    std::shared_ptr<IpcMemoryGrant> grant;
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
  // Imports go too, and every grant of this tenant is revoked.
  std::vector<std::pair<CUdeviceptr, Range>> takeAll();

  // --- virtual memory (cuMemCreate / cuMemMap) -----------------------------------------
  // Physical memory of an allocation handle: counted against the quota while it exists.
  void charge(size_t bytes);
  void uncharge(size_t bytes);
  void addMapping(CUdeviceptr ptr, size_t size, gpu::Gpu* g);
  // Forgets the mapping that starts at `ptr` with exactly `size` bytes; false if there is none.
  bool takeMapping(CUdeviceptr ptr, size_t size);

  // --- IPC -------------------------------------------------------------------------------
  // The allocation (not a global or mapping) holding `ptr`: its base and range, to export.
  std::optional<std::pair<CUdeviceptr, Range*>> allocationContaining(CUdeviceptr ptr);
  // Another tenant's live grant, opened by this tenant: counted, so that each open needs a close.
  void addImport(std::shared_ptr<const IpcMemoryGrant> grant);
  // Closes one open of the import at `base`; false if there is none.
  bool closeImport(CUdeviceptr base);
  size_t importCount() const { return imports_.size(); }

  // The GPU whose memory holds [ptr, ptr+size) if the tenant may use all of it (owns it, or
  // holds a live import of it), else nullptr.
  gpu::Gpu* ownerOf(CUdeviceptr ptr, size_t size) const;
  // Like ownerOf, owned memory only (what a tenant may free or export).
  gpu::Gpu* ownedBy(CUdeviceptr ptr, size_t size) const;
  size_t allocatedBytes() const { return allocatedBytes_; }
  size_t rangeCount() const { return ranges_.size(); }

 private:
  struct Import {
    std::shared_ptr<const IpcMemoryGrant> grant;
    uint32_t opens = 0;
  };

  void publish() { published_.store(allocatedBytes_, std::memory_order_relaxed); }
  static void revoke(Range& range) {
    if (range.grant) range.grant->live.store(false);
  }
  gpu::Gpu* importedBy(CUdeviceptr ptr, size_t size) const;

  uint64_t quotaBytes_;
  std::string tenant_;
  std::atomic<uint64_t>& published_;
  bool quotaLogged_ = false;
  std::map<CUdeviceptr, Range> ranges_;
  std::map<CUdeviceptr, Import> imports_;  // by base; kept apart: an owner may reuse the address
  size_t allocatedBytes_ = 0;
};

}  // namespace tally::server::session
