#include "server/session/virtual_memory_table.h"

namespace tally::server::session {

namespace {

// The entry of `map` (keyed by base, value: size or a struct with .size) containing `ptr`.
template <typename Map, typename SizeOf>
auto containing(const Map& map, CUdeviceptr ptr, SizeOf sizeOf) {
  auto it = map.upper_bound(ptr);
  if (it == map.begin()) return map.end();
  --it;
  return ptr - it->first < sizeOf(it->second) ? it : map.end();
}

}  // namespace

// --- allocation handles ------------------------------------------------------------------

CUresult VirtualMemoryTable::admitHandle(uint64_t id) const {
  return id == 0 || handles_.count(id) != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

VirtualMemoryTable::Handle* VirtualMemoryTable::handle(uint64_t id) {
  auto it = handles_.find(id);
  return it == handles_.end() ? nullptr : &it->second;
}

std::optional<VirtualMemoryTable::Handle> VirtualMemoryTable::release(uint64_t id, bool& known) {
  auto it = handles_.find(id);
  known = it != handles_.end() && it->second.references > 0;
  if (!known) return std::nullopt;
  if (--it->second.references > 0 || it->second.mappings > 0) return std::nullopt;
  Handle gone = it->second;
  handles_.erase(it);
  return gone;
}

std::optional<uint64_t> VirtualMemoryTable::retain(CUdeviceptr ptr) {
  auto mapping = mappingContaining(ptr);
  if (!mapping) return std::nullopt;
  Handle* h = handle(mapping->second.handle);
  if (h == nullptr) return std::nullopt;
  ++h->references;
  return mapping->second.handle;
}

// --- reservations ------------------------------------------------------------------------

CUresult VirtualMemoryTable::admitAddressFree(CUdeviceptr base, size_t size) const {
  auto it = reservations_.find(base);
  if (it == reservations_.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto mapped = mappings_.lower_bound(base);
  if (mapped != mappings_.end() && mapped->first - base < size) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// --- mappings ----------------------------------------------------------------------------

CUresult VirtualMemoryTable::admitMap(CUdeviceptr ptr, size_t size, size_t offset, uint64_t handleId) const {
  auto h = handles_.find(handleId);
  if (h == handles_.end() || h->second.references == 0) return CUDA_ERROR_INVALID_HANDLE;
  size_t handleEnd = 0;
  CUdeviceptr end = 0;
  if (size == 0 || __builtin_add_overflow(offset, size, &handleEnd) || handleEnd > h->second.size ||
      __builtin_add_overflow(ptr, size, &end)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto reservation = containing(reservations_, ptr, [](size_t s) { return s; });
  if (reservation == reservations_.end() || end - reservation->first > reservation->second) return CUDA_ERROR_INVALID_VALUE;
  // Overlap: a mapping that starts inside the range, or one that starts before it and reaches in.
  auto next = mappings_.lower_bound(ptr);
  if (next != mappings_.end() && next->first < end) return CUDA_ERROR_INVALID_VALUE;
  if (containing(mappings_, ptr, [](const Mapping& m) { return m.size; }) != mappings_.end()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

void VirtualMemoryTable::addMapping(CUdeviceptr ptr, size_t size, uint64_t handleId) {
  Handle& h = handles_.at(handleId);
  ++h.mappings;
  h.dirty = true;
  mappings_.emplace(ptr, Mapping{size, handleId, h.gpu});
}

std::optional<std::vector<std::pair<CUdeviceptr, VirtualMemoryTable::Mapping>>> VirtualMemoryTable::mappingsTiling(
    CUdeviceptr ptr, size_t size) const {
  CUdeviceptr end = 0;
  if (size == 0 || __builtin_add_overflow(ptr, size, &end)) return std::nullopt;
  std::vector<std::pair<CUdeviceptr, Mapping>> tiles;
  CUdeviceptr at = ptr;
  for (auto it = mappings_.find(ptr); it != mappings_.end() && it->first == at && at < end; ++it) {
    tiles.emplace_back(*it);
    at += it->second.size;
  }
  if (at != end) return std::nullopt;
  return tiles;
}

std::optional<VirtualMemoryTable::Handle> VirtualMemoryTable::removeMapping(CUdeviceptr ptr) {
  auto it = mappings_.find(ptr);
  if (it == mappings_.end()) return std::nullopt;
  uint64_t id = it->second.handle;
  mappings_.erase(it);
  auto h = handles_.find(id);
  if (h == handles_.end()) return std::nullopt;
  if (h->second.mappings > 0) --h->second.mappings;
  if (h->second.references > 0 || h->second.mappings > 0) return std::nullopt;
  Handle gone = h->second;
  handles_.erase(h);
  return gone;
}

std::optional<std::pair<CUdeviceptr, VirtualMemoryTable::Mapping>> VirtualMemoryTable::mappingContaining(
    CUdeviceptr ptr) const {
  auto it = containing(mappings_, ptr, [](const Mapping& m) { return m.size; });
  if (it == mappings_.end()) return std::nullopt;
  return *it;
}

// --- end of the tenancy ------------------------------------------------------------------

VirtualMemoryTable::Contents VirtualMemoryTable::takeAll() {
  Contents all;
  all.mappings.assign(mappings_.begin(), mappings_.end());
  all.reservations.assign(reservations_.begin(), reservations_.end());
  for (auto& [id, h] : handles_) all.handles.push_back(h);
  mappings_.clear();
  reservations_.clear();
  handles_.clear();
  return all;
}

}  // namespace tally::server::session
