#include "server/session/host_mapping_table.h"

#include "server/gpu/gpu.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace tally::server::session {

std::string sharedFileProblem(int fd, size_t size) {
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) return fmt::format("its file takes no seals ({}): not a sealable memfd", std::strerror(errno));
  if ((seals & F_SEAL_SHRINK) == 0) return "its file is not sealed against shrinking (F_SEAL_SHRINK)";
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fmt::format("fstat of its file failed: {}", std::strerror(errno));
  if (st.st_size < 0 || static_cast<uint64_t>(st.st_size) < size) {
    return fmt::format("its file holds {} bytes, fewer than the {} to map", st.st_size, size);
  }
  return {};
}

CUresult HostMappingTable::admit(uint64_t clientAddress) {
  if (mappings_.count(clientAddress) != 0) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (!limit_.allowsOneMore(mappings_.size())) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

CUresult HostMappingTable::map(int memfd, uint64_t clientAddress, size_t size, gpu::Gpu* g, uint64_t& deviceAddress) {
  if (CUresult r = admit(clientAddress); r != CUDA_SUCCESS) return r;
  if (std::string problem = sharedFileProblem(memfd, size); !problem.empty()) {
    spdlog::warn("{}: refusing to map its host memory at 0x{:x} ({} bytes): {}", tenant_, clientAddress, size, problem);
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Same address as in the client when it is free here too: then device-mapped pinned
  // pointers that the application passes to kernels are valid as they are.
  void* local = ::mmap(reinterpret_cast<void*>(clientAddress), size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_FIXED_NOREPLACE, memfd, 0);
  if (local == MAP_FAILED) local = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  if (local == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  g->makeCurrent();
  // Registered or refused: the driver copies unregistered (pageable) memory in pieces driven by
  // the calling thread, so the stream waits for a thread that a context-wide call (module
  // load, free) can block — a deadlock across tenants (docs/scheduler.md). A refused client
  // falls back to unshared memory, which travels through tallyd's pinned staging.
  if (CUresult r = cuMemHostRegister(local, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
      r != CUDA_SUCCESS) {
    ::munmap(local, size);
    return r;
  }
  CUdeviceptr mapped = 0;
  deviceAddress = cuMemHostGetDevicePointer(&mapped, local, 0) == CUDA_SUCCESS ? mapped : 0;
  add(clientAddress, HostMapping{local, size, deviceAddress});
  return CUDA_SUCCESS;
}

bool HostMappingTable::holdsWordIn(const HostMapping& mapping) const {
  auto* begin = static_cast<uint32_t*>(mapping.local);
  auto held = heldWords_.lower_bound(begin);
  return held != heldWords_.end() && reinterpret_cast<char*>(*held) < reinterpret_cast<char*>(begin) + mapping.size;
}

CUresult HostMappingTable::unmap(uint64_t clientAddress) {
  auto it = mappings_.find(clientAddress);
  if (it == mappings_.end()) return CUDA_ERROR_INVALID_VALUE;
  if (holdsWordIn(it->second)) return CUDA_ERROR_INVALID_VALUE;  // a stream may still wait on a word in it
  cuMemHostUnregister(it->second.local);
  ::munmap(it->second.local, it->second.size);
  mappings_.erase(it);
  return CUDA_SUCCESS;
}

void HostMappingTable::unmapAll() {
  for (auto& [addr, mapping] : mappings_) {
    cuMemHostUnregister(mapping.local);
    ::munmap(mapping.local, mapping.size);
  }
  mappings_.clear();
  heldWords_.clear();
}

std::map<uint64_t, HostMapping>::const_iterator HostMappingTable::containing(uint64_t clientAddress) const {
  auto it = mappings_.upper_bound(clientAddress);
  if (it == mappings_.begin()) return mappings_.end();
  return std::prev(it);
}

void* HostMappingTable::hostAddress(uint64_t clientAddress, size_t size) const {
  auto it = containing(clientAddress);
  if (it == mappings_.end()) return nullptr;
  uint64_t offset = clientAddress - it->first;
  if (offset > it->second.size || size > it->second.size - offset) return nullptr;
  return static_cast<char*>(it->second.local) + offset;
}

CUdeviceptr HostMappingTable::deviceAddress(uint64_t clientAddress, size_t size) const {
  auto it = containing(clientAddress);
  if (it == mappings_.end() || it->second.device == 0) return 0;
  uint64_t offset = clientAddress - it->first;
  if (offset > it->second.size || size > it->second.size - offset) return 0;
  return it->second.device + offset;
}

std::optional<HostMappingTable::SharedWord> HostMappingTable::sharedWord(uint64_t clientAddress) const {
  if (clientAddress % sizeof(uint32_t) != 0) return std::nullopt;
  void* local = hostAddress(clientAddress, sizeof(uint32_t));
  CUdeviceptr device = deviceAddress(clientAddress, sizeof(uint32_t));
  if (local == nullptr || device == 0) return std::nullopt;
  return SharedWord{static_cast<uint32_t*>(local), device};
}

}  // namespace tally::server::session
