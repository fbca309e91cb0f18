#include "server/session/memory_table.h"

#include "server/session/auth.h"

#include <spdlog/spdlog.h>

#include <algorithm>

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
  Range range;
  range.size = size;
  range.gpu = g;
  ranges_.emplace(ptr, std::move(range));
  allocatedBytes_ += size;
  publish();
}

std::optional<MemoryTable::Range> MemoryTable::takeAllocation(CUdeviceptr ptr) {
  auto it = ranges_.find(ptr);
  if (it == ranges_.end() || !it->second.allocation) return std::nullopt;
  Range taken = it->second;
  revoke(taken);
  allocatedBytes_ -= taken.size;
  ranges_.erase(it);
  publish();
  return taken;
}

void MemoryTable::addGlobal(CUdeviceptr ptr, size_t size, gpu::Gpu* g, uint64_t module) {
  if (size == 0) return;
  Range range;
  range.size = size;
  range.gpu = g;
  range.allocation = false;
  range.module = module;
  ranges_.emplace(ptr, std::move(range));
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
  for (auto& [ptr, range] : taken) revoke(range);
  ranges_.clear();
  imports_.clear();
  allocatedBytes_ = 0;
  publish();
  return taken;
}

// Mappings may continue one another: a range that runs from one into the next is usable when
// every piece is mapped (PyTorch's expandable segments put tensors across piece boundaries).
gpu::Gpu* MemoryTable::ownedBy(CUdeviceptr ptr, size_t size) const {
  CUdeviceptr end = 0;
  if (__builtin_add_overflow(ptr, size, &end)) return nullptr;
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return nullptr;
  --it;
  CUdeviceptr base = it->first;
  gpu::Gpu* g = it->second.gpu;
  if (ptr < base || ptr - base > it->second.size) return nullptr;
  CUdeviceptr covered = base + it->second.size;
  while (covered < end) {
    if (!it->second.mapping) return nullptr;
    ++it;
    if (it == ranges_.end() || it->first != covered || !it->second.mapping || it->second.gpu != g) return nullptr;
    covered += it->second.size;
  }
  return g;
}

gpu::Gpu* MemoryTable::importedBy(CUdeviceptr ptr, size_t size) const {
  auto it = imports_.upper_bound(ptr);
  if (it == imports_.begin()) return nullptr;
  --it;
  const IpcMemoryGrant& grant = *it->second.grant;
  if (!grant.live.load()) return nullptr;
  if (ptr < grant.base || size > grant.size || ptr - grant.base > grant.size - size) return nullptr;
  return grant.gpu;
}

gpu::Gpu* MemoryTable::ownerOf(CUdeviceptr ptr, size_t size) const {
  if (gpu::Gpu* g = ownedBy(ptr, size)) return g;
  return importedBy(ptr, size);
}

// --- virtual memory ----------------------------------------------------------------------

void MemoryTable::charge(size_t bytes) {
  allocatedBytes_ += bytes;
  publish();
}

void MemoryTable::uncharge(size_t bytes) {
  allocatedBytes_ -= std::min(bytes, allocatedBytes_);
  publish();
}

void MemoryTable::addMapping(CUdeviceptr ptr, size_t size, gpu::Gpu* g) {
  Range range;
  range.size = size;
  range.gpu = g;
  range.allocation = false;
  range.mapping = true;
  ranges_.emplace(ptr, std::move(range));
}

bool MemoryTable::takeMapping(CUdeviceptr ptr, size_t size) {
  auto it = ranges_.find(ptr);
  if (it == ranges_.end() || !it->second.mapping || it->second.size != size) return false;
  ranges_.erase(it);
  return true;
}

// --- IPC ---------------------------------------------------------------------------------

std::optional<std::pair<CUdeviceptr, MemoryTable::Range*>> MemoryTable::allocationContaining(CUdeviceptr ptr) {
  auto it = ranges_.upper_bound(ptr);
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (!it->second.allocation || ptr - it->first >= it->second.size) return std::nullopt;
  return std::make_pair(it->first, &it->second);
}

void MemoryTable::addImport(std::shared_ptr<const IpcMemoryGrant> grant) {
  // An import whose owner freed the range is dead; the address may come back under a new grant.
  auto it = imports_.find(grant->base);
  if (it != imports_.end() && it->second.grant != grant) imports_.erase(it);
  Import& entry = imports_[grant->base];
  entry.grant = std::move(grant);
  ++entry.opens;
}

bool MemoryTable::closeImport(CUdeviceptr base) {
  auto it = imports_.find(base);
  if (it == imports_.end()) return false;
  if (--it->second.opens == 0) imports_.erase(it);
  return true;
}

}  // namespace tally::server::session
