// One tenant's CUDA arrays and mipmapped arrays (under the ids its client chose; a level of a
// mipmapped array is an array entry of its own, which goes with its mipmapped array) and the texture and surface objects
// it created (under the driver's values, which its kernels take as parameters). A tenant can name
// only what is listed here. An array some object still reads is *retired* when the tenant
// destroys it: no longer the tenant's to name, but kept (and counted against its quota) until the
// last object over it is destroyed, so an object never reads memory the driver has handed on.
// Bookkeeping only; the handlers (api/array_api.cc) and Tenant call the driver.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

struct ArrayState {
  gpu::Gpu* gpu = nullptr;
  CUarray array = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  size_t bytes = 0;        // charged against the tenant's memory quota while the array exists
  uint32_t views = 0;      // texture and surface objects over it
  bool retired = false;    // destroyed by the tenant, kept for its views
  uint64_t mipmapped = 0;  // a level of this mipmapped array: its memory, never destroyed alone
};

struct MipmappedState {
  gpu::Gpu* gpu = nullptr;
  CUmipmappedArray array = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};  // of level 0
  unsigned levels = 0;
  size_t bytes = 0;
  uint32_t views = 0;      // objects over it or over one of its levels
  bool retired = false;
};

struct TextureObjectState {
  gpu::Gpu* gpu = nullptr;
  uint64_t array = 0;      // the array id it reads (0: none)
  uint64_t mipmapped = 0;  // the mipmapped array it reads, itself or through a level (0: none)
  bool surface = false;
};

class ArrayTable {
 public:
  // Objects of each kind a tenant may hold at once: each holds driver state.
  static constexpr size_t kMaxArrays = 65536;
  static constexpr size_t kMaxObjects = 65536;

  bool containsId(uint64_t id) const { return arrays_.count(id) != 0; }
  size_t arrayCount() const { return arrays_.size(); }
  // The tenant's live (not retired) array `id`, or nullptr.
  ArrayState* find(uint64_t id);
  void add(uint64_t id, const ArrayState& state) { arrays_.emplace(id, state); }
  // The tenant destroys array `id`: the state to destroy now, or nullopt when there is no such
  // live array (`known` false) or objects still read it (`known` true; it is retired).
  std::optional<ArrayState> remove(uint64_t id, bool& known);

  // --- mipmapped arrays ----------------------------------------------------------------------
  bool containsMipmapped(uint64_t id) const { return mipmapped_.count(id) != 0; }
  size_t mipmappedCount() const { return mipmapped_.size(); }
  MipmappedState* findMipmapped(uint64_t id);
  void addMipmapped(uint64_t id, const MipmappedState& state) { mipmapped_.emplace(id, state); }
  // As remove(); the entries of its levels go with it (at once, or when it is released).
  std::optional<MipmappedState> removeMipmapped(uint64_t id, bool& known);

  // --- texture and surface objects ---------------------------------------------------------
  size_t objectCount() const { return objects_.size(); }
  // Records an object over `state.array` (counted as a view of it).
  void addObject(uint64_t value, const TextureObjectState& state);
  // The object `value` of the kind asked for, if it is the tenant's.
  const TextureObjectState* findObject(uint64_t value, bool surface) const;
  // Forgets the object; `released` / `releasedMipmapped` receive the retired array or mipmapped
  // array its last view let go (to destroy).
  std::optional<TextureObjectState> removeObject(uint64_t value, bool surface, std::optional<ArrayState>& released,
                                                 std::optional<MipmappedState>& releasedMipmapped);

  // The end of the tenancy: every object, then every array (retired ones too; levels are left
  // to their mipmapped arrays), then every mipmapped array.
  std::vector<std::pair<uint64_t, TextureObjectState>> takeObjects();
  std::vector<ArrayState> takeArrays();
  std::vector<MipmappedState> takeMipmapped();

 private:
  static uint64_t key(uint64_t value, bool surface) { return value * 2 + (surface ? 1 : 0); }
  void forgetLevelsOf(uint64_t mipmapped);
  std::unordered_map<uint64_t, ArrayState> arrays_;
  std::unordered_map<uint64_t, MipmappedState> mipmapped_;
  std::unordered_map<uint64_t, std::pair<uint64_t, TextureObjectState>> objects_;  // key -> (value, state)
};

// Bytes of one element of `format` (one channel), 0 for a format tallyd does not forward.
size_t arrayFormatBytes(CUarray_format format);
// The bytes an array of `d` holds (width x rows x slices elements), nullopt when a size is zero
// where it must not be, the channel count is not 1, 2 or 4, the format is unknown, or the
// product wraps. `unsupported` is set for a format CUDA knows but tallyd does not forward.
std::optional<size_t> arrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, bool& unsupported);

}  // namespace tally::server::session
