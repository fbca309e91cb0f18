// Module images by content hash, shared by every tenant of this tallyd: the bytes cross the
// wire once per server. Loading stays per tenant (each gets its own __device__ globals).
#pragma once

#include "common/hash/content_hash.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace tally::server::gpu {

class ModuleStore {
 public:
  explicit ModuleStore(size_t maxBytes) : maxBytes_(maxBytes) {}

  std::shared_ptr<const std::string> find(const hash::ContentHash& hash);
  // Keeps the image unless the store is full; returns the shared copy either way.
  std::shared_ptr<const std::string> insert(const hash::ContentHash& hash, std::string image);

 private:
  size_t maxBytes_;
  size_t bytes_ = 0;
  std::mutex mutex_;
  std::map<hash::ContentHash, std::shared_ptr<const std::string>> images_;
};

}  // namespace tally::server::gpu
