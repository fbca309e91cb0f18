#include "server/session/memory_table.h"

#include "server/session/auth.h"

#include <spdlog/spdlog.h>

namespace tally::server::session {

bool MemoryTable::quotaAllows(size_t request) {
  if (withinQuota(allocatedBytes_, request, quotaBytes_)) return true;
  if (!quotaLogged_) {
    spdlog::warn("{} exceeds its memory quota: {} bytes allocated, {} more requested, quota {}", tenant_,
                 allocatedBytes_, request, quotaBytes_);
    quotaLogged_ = true;
  }
  return false;
}

void MemoryTable::addAllocation(CUdeviceptr ptr, size_t size, gpu::Gpu* g) {
  ranges_.emplace(ptr, Range{size, g, true, 0});
  allocatedBytes_ += size;
  publish();
}

std::optional<MemoryTable::Range> MemoryTable::takeAllocation(CUdeviceptr ptr) {
  auto it = ranges_.find(ptr);
  if (it == ranges_.end() || !it->second.allocation) return std::nullopt;
  Range taken = it->second;
  allocatedBytes_ -= taken.size;
  ranges_.erase(it);
  publish();
  return taken;
}

void MemoryTable::addGlobal(CUdeviceptr ptr, size_t size, gpu::Gpu* g, uint64_t module) {
  if (size > 0) ranges_.emplace(ptr, Range{size, g, false, module});
}

std::vector<std::pair<CUdeviceptr, MemoryTable::Range>> MemoryTable::takeGlobalsOf(uint64_t module) {
  std::vector<std::pair<CUdeviceptr, Range>> taken;
  for (auto it = ranges_.begin(); it != ranges_.end();) {
    if (it->second.allocation || it->second.module != module) {
      ++it;
      continue;
    }
    taken.emplace_back(it->first, it->second);
    it = ranges_.erase(it);
  }
  return taken;
}

std::vector<std::pair<CUdeviceptr, MemoryTable::Range>> MemoryTable::takeAll() {
  std::vector<std::pair<CUdeviceptr, Range>> taken(ranges_.begin(), ranges_.end());
  ranges_.clear();
  allocatedBytes_ = 0;
  publish();
  return taken;
}

gpu::Gpu* MemoryTable::ownerOf(CUdeviceptr ptr, size_t size) const {
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  CUdeviceptr base = it->first;
  size_t extent = it->second.size;
  if (ptr < base || size > extent || ptr - base > extent - size) return nullptr;
  return it->second.gpu;
}

}  // namespace tally::server::session
