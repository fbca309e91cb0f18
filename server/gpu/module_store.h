// Module images by content hash, shared by every tenant of this tallyd: the bytes cross the
// wire once per server. Loading stays per tenant (each gets its own __device__ globals).
#pragma once

#include "common/hash/content_hash.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace tally::server::gpu {

struct StoredModule {
  std::string image;      // what the device loads: cubin or PTX
  std::string sourcePtx;  // the PTX a cubin image was compiled from; empty if none was sent
  // The PTX to transform kernels from: the image itself when it is PTX.
  const std::string& ptx(bool imageIsPtx) const { return imageIsPtx ? image : sourcePtx; }
  size_t bytes() const { return image.size() + sourcePtx.size(); }
};

class ModuleStore {
 public:
  explicit ModuleStore(size_t maxBytes) : maxBytes_(maxBytes) {}

  std::shared_ptr<const StoredModule> find(const hash::ContentHash& hash);
  // Keeps the module unless the store is full; returns the shared copy either way.
  std::shared_ptr<const StoredModule> insert(const hash::ContentHash& hash, StoredModule module);

 private:
  size_t maxBytes_;
  size_t bytes_ = 0;
  std::mutex mutex_;
  std::map<hash::ContentHash, std::shared_ptr<const StoredModule>> modules_;
};

}  // namespace tally::server::gpu
