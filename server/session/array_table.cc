#include "server/session/array_table.h"

#include <iterator>

namespace tally::server::session {

ArrayState* ArrayTable::find(uint64_t id) {
  auto it = arrays_.find(id);
  return it == arrays_.end() || it->second.retired ? nullptr : &it->second;
}

std::optional<ArrayState> ArrayTable::remove(uint64_t id, bool& known) {
  auto it = arrays_.find(id);
  known = it != arrays_.end() && !it->second.retired && it->second.mipmapped == 0;
  if (!known) return std::nullopt;
  if (it->second.views > 0) {
    it->second.retired = true;
    return std::nullopt;
  }
  ArrayState state = it->second;
  arrays_.erase(it);
  return state;
}

MipmappedState* ArrayTable::findMipmapped(uint64_t id) {
  auto it = mipmapped_.find(id);
  return it == mipmapped_.end() || it->second.retired ? nullptr : &it->second;
}

void ArrayTable::forgetLevelsOf(uint64_t mipmapped) {
  for (auto it = arrays_.begin(); it != arrays_.end();) {
    it = it->second.mipmapped == mipmapped ? arrays_.erase(it) : std::next(it);
  }
}

std::optional<MipmappedState> ArrayTable::removeMipmapped(uint64_t id, bool& known) {
  auto it = mipmapped_.find(id);
  known = it != mipmapped_.end() && !it->second.retired;
  if (!known) return std::nullopt;
  // Its levels are no longer the tenant's to name, whatever objects still read them.
  for (auto& [levelId, level] : arrays_) {
    if (level.mipmapped == id) level.retired = true;
  }
  if (it->second.views > 0) {
    it->second.retired = true;
    return std::nullopt;
  }
  MipmappedState state = it->second;
  mipmapped_.erase(it);
  forgetLevelsOf(id);
  return state;
}

void ArrayTable::addObject(uint64_t value, const TextureObjectState& state) {
  TextureObjectState s = state;
  if (s.array != 0) {
    if (auto it = arrays_.find(s.array); it != arrays_.end()) {
      ++it->second.views;
      s.mipmapped = it->second.mipmapped;  // a level: its mipmapped array is what must stay
    }
  }
  if (s.mipmapped != 0) {
    if (auto it = mipmapped_.find(s.mipmapped); it != mipmapped_.end()) ++it->second.views;
  }
  objects_[key(value, s.surface)] = {value, s};
}

const TextureObjectState* ArrayTable::findObject(uint64_t value, bool surface) const {
  auto it = objects_.find(key(value, surface));
  if (it == objects_.end() || it->second.first != value) return nullptr;
  return &it->second.second;
}

std::optional<TextureObjectState> ArrayTable::removeObject(uint64_t value, bool surface,
                                                           std::optional<ArrayState>& released,
                                                           std::optional<MipmappedState>& releasedMipmapped) {
  auto it = objects_.find(key(value, surface));
  if (it == objects_.end() || it->second.first != value) return std::nullopt;
  TextureObjectState state = it->second.second;
  objects_.erase(it);
  if (state.array != 0) {
    if (auto a = arrays_.find(state.array); a != arrays_.end()) {
      if (a->second.views > 0) --a->second.views;
      if (a->second.retired && a->second.views == 0 && a->second.mipmapped == 0) {
        released = a->second;
        arrays_.erase(a);
      }
    }
  }
  if (state.mipmapped != 0) {
    if (auto m = mipmapped_.find(state.mipmapped); m != mipmapped_.end()) {
      if (m->second.views > 0) --m->second.views;
      if (m->second.retired && m->second.views == 0) {
        releasedMipmapped = m->second;
        mipmapped_.erase(m);
        forgetLevelsOf(state.mipmapped);
      }
    }
  }
  return state;
}

std::vector<std::pair<uint64_t, TextureObjectState>> ArrayTable::takeObjects() {
  std::vector<std::pair<uint64_t, TextureObjectState>> all;
  for (auto& [k, entry] : objects_) all.push_back(entry);
  objects_.clear();
  for (auto& [id, a] : arrays_) a.views = 0;
  for (auto& [id, m] : mipmapped_) m.views = 0;
  return all;
}

std::vector<ArrayState> ArrayTable::takeArrays() {
  std::vector<ArrayState> all;
  for (auto& [id, a] : arrays_) {
    if (a.mipmapped == 0) all.push_back(a);
  }
  arrays_.clear();
  return all;
}

std::vector<MipmappedState> ArrayTable::takeMipmapped() {
  std::vector<MipmappedState> all;
  for (auto& [id, m] : mipmapped_) all.push_back(m);
  mipmapped_.clear();
  return all;
}

size_t arrayFormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

namespace {

// Formats cuda.h names that tallyd does not forward (planar, normalized-integer and
// block-compressed ones): NotSupported rather than the driver's invalid value.
bool knownFormat(uint32_t format) {
  return format == CU_AD_FORMAT_UNORM_INT_101010_2 || (format >= CU_AD_FORMAT_BC1_UNORM && format <= 0xb5) ||
         (format >= CU_AD_FORMAT_UNORM_INT8X1 && format <= CU_AD_FORMAT_SNORM_INT16X4);
}

}  // namespace

std::optional<size_t> arrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, bool& unsupported) {
  unsupported = false;
  size_t element = arrayFormatBytes(d.Format);
  if (element == 0) {
    unsupported = knownFormat(d.Format);
    return std::nullopt;
  }
  if (d.Width == 0 || (d.Height == 0 && d.Depth != 0 && (d.Flags & CUDA_ARRAY3D_LAYERED) == 0)) return std::nullopt;
  if (d.NumChannels != 1 && d.NumChannels != 2 && d.NumChannels != 4) return std::nullopt;
  size_t bytes = element * d.NumChannels;
  for (size_t extent : {d.Width, d.Height, d.Depth}) {
    if (__builtin_mul_overflow(bytes, extent == 0 ? size_t{1} : extent, &bytes)) return std::nullopt;
  }
  return bytes;
}

}  // namespace tally::server::session
