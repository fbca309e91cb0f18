#include "server/gpu/module_pool.h"

#include <algorithm>

namespace tally::server::gpu {

CUmodule ModulePool::take(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = idle_.find(key);
  if (it == idle_.end()) return nullptr;
  CUmodule module = it->second.module;
  idle_.erase(it);
  return module;
}

void ModulePool::give(const std::string& key, CUmodule module) {
  std::vector<CUmodule> evicted;
  {
    std::lock_guard lock(mutex_);
    idle_.emplace(key, Idle{clock_++, module});
    while (idle_.size() > maxIdle_) {
      auto oldest = std::min_element(idle_.begin(), idle_.end(),
                                     [](const auto& a, const auto& b) { return a.second.since < b.second.since; });
      evicted.push_back(oldest->second.module);
      idle_.erase(oldest);
    }
  }
  unloadAll(evicted);
}

size_t ModulePool::idleCount() const {
  std::lock_guard lock(mutex_);
  return idle_.size();
}

size_t ModulePool::unloadIdle() {
  std::vector<CUmodule> all;
  {
    std::lock_guard lock(mutex_);
    for (auto& [key, idle] : idle_) all.push_back(idle.module);
    idle_.clear();
  }
  unloadAll(all);
  return all.size();
}

void ModulePool::unloadAll(const std::vector<CUmodule>& modules) const {
  for (CUmodule m : modules) unload_(m);
}

}  // namespace tally::server::gpu
