// Client memory shared with tallyd through a memfd (pinned on the client side), by the client's
// address: where tallyd mapped it, and where the GPU sees it. Lookups and bookkeeping (add,
// hostAddress, sharedWord, the words streams wait on) need no driver and are unit-tested;
// map/unmap/unmapAll are the edges (mmap and cuMemHostRegister).
#pragma once

#include "server/session/count_limit.h"

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

struct HostMapping {
  void* local = nullptr;    // where tallyd mapped the client's memfd
  size_t size = 0;
  CUdeviceptr device = 0;  // where the GPU sees it (every mapping is registered with the driver)
};

// Why tallyd must not map `fd` for `size` bytes, or empty if it may. The client keeps the file
// and could shrink it: tallyd would then take SIGBUS (every tenant down) when it touches a page
// past the new end, e.g. the host-callback words it fills at disconnect. So the file must be
// sealed against shrinking (F_SEAL_SHRINK) and already hold `size` bytes.
std::string sharedFileProblem(int fd, size_t size);

class HostMappingTable {
 public:
  // `maxMappings` 0 = unlimited.
  HostMappingTable(uint64_t maxMappings, std::string tenant)
      : limit_("host mappings", maxMappings, tenant), tenant_(tenant) {}

  // Maps the client's memfd for [clientAddress, +size) and registers it with the driver.
  // `deviceAddress` is where kernels see it (0 if the driver gives no device pointer).
  // CUDA_ERROR_INVALID_VALUE for a file that could shrink under tallyd (sharedFileProblem),
  // CUDA_ERROR_OUT_OF_MEMORY past max_host_mappings.
  CUresult map(int memfd, uint64_t clientAddress, size_t size, gpu::Gpu* g, uint64_t& deviceAddress);
  // CUDA_ERROR_INVALID_VALUE if unknown or a stream may still wait on a word in it.
  CUresult unmap(uint64_t clientAddress);
  // Unregisters and unmaps every mapping: the end of the tenancy.
  void unmapAll();

  // Whether a mapping may be added at `clientAddress` (the same codes as map()).
  CUresult admit(uint64_t clientAddress);
  // Records a mapping already made.
  void add(uint64_t clientAddress, HostMapping mapping) { mappings_.emplace(clientAddress, mapping); }

  // Local address of [clientAddress, +size) if it lies inside one mapping, else nullptr.
  void* hostAddress(uint64_t clientAddress, size_t size) const;
  // Where the GPU sees [clientAddress, +size) if it lies inside one device-mapped mapping, else 0.
  // Programs use pinned pointers as device pointers (unified addressing), e.g. to memset them.
  CUdeviceptr deviceAddress(uint64_t clientAddress, size_t size) const;
  // A u32 word of a registered mapping, where tallyd and the GPU see it (host callbacks).
  struct SharedWord {
    uint32_t* local;
    CUdeviceptr device;
  };
  std::optional<SharedWord> sharedWord(uint64_t clientAddress) const;
  // A stream waits on this word: its mapping stays until the tenant ends.
  void holdWord(uint32_t* local) { heldWords_.insert(local); }
  size_t count() const { return mappings_.size(); }

 private:
  // The mapping that contains clientAddress, or end().
  std::map<uint64_t, HostMapping>::const_iterator containing(uint64_t clientAddress) const;
  bool holdsWordIn(const HostMapping& mapping) const;

  CountLimit limit_;
  std::string tenant_;
  std::map<uint64_t, HostMapping> mappings_;
  std::set<uint32_t*> heldWords_;
};

}  // namespace tally::server::session
