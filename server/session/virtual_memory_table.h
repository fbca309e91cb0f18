// One tenant's virtual memory management objects (cuMemCreate, cuMemAddressReserve, cuMemMap):
// allocation handles (physical memory, counted against the quota by the caller through
// MemoryTable::charge), reserved address ranges, and which handle is mapped where. Pure
// bookkeeping and the ownership rules (no driver calls): a tenant maps only its own handles,
// only inside its own reservations, never over an existing mapping, and unmaps, frees and
// releases only what is its own. The mapped ranges themselves are also in the MemoryTable,
// which is what copies, memsets and launches check.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

class VirtualMemoryTable {
 public:
  struct Handle {
    CUmemGenericAllocationHandle handle = 0;  // tallyd's, never sent to the client
    size_t size = 0;
    gpu::Gpu* gpu = nullptr;
    uint32_t references = 1;  // cuMemCreate, plus one per cuMemRetainAllocationHandle
    uint32_t mappings = 0;
    bool dirty = false;       // mapped at some point: may hold data, cleared before it goes
  };
  struct Mapping {
    size_t size = 0;
    uint64_t handle = 0;      // the client's id
    gpu::Gpu* gpu = nullptr;
  };

  explicit VirtualMemoryTable(std::string tenant) : tenant_(std::move(tenant)) {}

  // --- allocation handles ------------------------------------------------------------
  // CUDA_ERROR_INVALID_VALUE if `id` is in use.
  CUresult admitHandle(uint64_t id) const;
  void addHandle(uint64_t id, Handle h) { handles_.emplace(id, h); }
  Handle* handle(uint64_t id);
  // Drops one reference. The handle is returned (and forgotten) when its memory goes now: no
  // reference and no mapping left; a mapped handle goes at its last unmap. nullopt otherwise,
  // and `known` false for an id that is not this tenant's.
  std::optional<Handle> release(uint64_t id, bool& known);
  // The handle mapped at `ptr` (anywhere in a mapping), with one more reference.
  std::optional<uint64_t> retain(CUdeviceptr ptr);

  // --- reservations ------------------------------------------------------------------
  void addReservation(CUdeviceptr base, size_t size) { reservations_.emplace(base, size); }
  // CUDA_SUCCESS if [base, base+size) is exactly one reservation of this tenant, with nothing
  // mapped in it.
  CUresult admitAddressFree(CUdeviceptr base, size_t size) const;
  void removeReservation(CUdeviceptr base) { reservations_.erase(base); }

  // --- mappings ----------------------------------------------------------------------
  // CUDA_SUCCESS if `handleId` ([offset, offset+size) of it) may be mapped at [ptr, ptr+size):
  // the handle is this tenant's, the range lies in one of its reservations and overlaps none of
  // its mappings.
  CUresult admitMap(CUdeviceptr ptr, size_t size, size_t offset, uint64_t handleId) const;
  void addMapping(CUdeviceptr ptr, size_t size, uint64_t handleId);
  // The whole mappings that exactly tile [ptr, ptr+size), in address order; nullopt otherwise.
  std::optional<std::vector<std::pair<CUdeviceptr, Mapping>>> mappingsTiling(CUdeviceptr ptr, size_t size) const;
  // Forgets the mapping at `ptr`. Returns its handle when that goes with it (released earlier,
  // this was its last mapping): the caller clears and releases it.
  std::optional<Handle> removeMapping(CUdeviceptr ptr);
  // The mapping containing `ptr`, if any.
  std::optional<std::pair<CUdeviceptr, Mapping>> mappingContaining(CUdeviceptr ptr) const;

  // --- end of the tenancy --------------------------------------------------------------
  // Everything, for Tenant::release: mappings first (unmap), then reservations, then handles.
  struct Contents {
    std::vector<std::pair<CUdeviceptr, Mapping>> mappings;
    std::vector<std::pair<CUdeviceptr, size_t>> reservations;
    std::vector<Handle> handles;
  };
  Contents takeAll();

  size_t handleCount() const { return handles_.size(); }
  size_t reservationCount() const { return reservations_.size(); }
  size_t mappingCount() const { return mappings_.size(); }
  const std::string& tenant() const { return tenant_; }

 private:
  std::string tenant_;
  std::unordered_map<uint64_t, Handle> handles_;
  std::map<CUdeviceptr, size_t> reservations_;
  std::map<CUdeviceptr, Mapping> mappings_;
};

}  // namespace tally::server::session
