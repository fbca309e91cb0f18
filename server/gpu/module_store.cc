#include "server/gpu/module_store.h"

namespace tally::server::gpu {

std::shared_ptr<const std::string> ModuleStore::find(const hash::ContentHash& hash) {
  std::lock_guard lock(mutex_);
  auto it = images_.find(hash);
  return it == images_.end() ? nullptr : it->second;
}

std::shared_ptr<const std::string> ModuleStore::insert(const hash::ContentHash& hash, std::string image) {
  auto shared = std::make_shared<const std::string>(std::move(image));
  std::lock_guard lock(mutex_);
  if (bytes_ + shared->size() <= maxBytes_ && images_.emplace(hash, shared).second) bytes_ += shared->size();
  return shared;
}

}  // namespace tally::server::gpu
