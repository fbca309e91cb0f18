#include "server/gpu/module_store.h"

namespace tally::server::gpu {

std::shared_ptr<const StoredModule> ModuleStore::find(const hash::ContentHash& hash) {
  std::lock_guard lock(mutex_);
  auto it = modules_.find(hash);
  return it == modules_.end() ? nullptr : it->second;
}

std::shared_ptr<const StoredModule> ModuleStore::insert(const hash::ContentHash& hash, StoredModule module) {
  auto shared = std::make_shared<const StoredModule>(std::move(module));
  std::lock_guard lock(mutex_);
  if (bytes_ + shared->bytes() <= maxBytes_ && modules_.emplace(hash, shared).second) bytes_ += shared->bytes();
  return shared;
}

}  // namespace tally::server::gpu
