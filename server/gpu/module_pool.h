// Loaded modules kept for the next tenant that loads the same image.
//
// cuModuleLoadData and cuModuleUnload wait for every running kernel of the context and, while
// they wait, hold back other threads' launches and event records (bench/micro/
// implicit_sync_probe): in a shared context one tenant's start or exit would stall every tenant
// for as long as their kernels run. An idle instance is handed out again instead, so tenants
// that come and go with images already seen make neither call. Only images without module-scope
// data are pooled (fatbin::declaresModuleData): a variable's value would pass from one tenant
// to the next. When a GPU's last tenant leaves, Gpu unloads its idle instances: no kernel runs
// then, so the unload costs nobody anything, and tallyd's memory is back to its idle figure.
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tally::server::gpu {

class ModulePool {
 public:
  using Unload = std::function<void(CUmodule)>;
  // `unload` is called outside the pool's lock, on the thread that gives up the instances.
  ModulePool(size_t maxIdle, Unload unload) : maxIdle_(maxIdle), unload_(std::move(unload)) {}
  ~ModulePool() { unloadIdle(); }
  ModulePool(const ModulePool&) = delete;
  ModulePool& operator=(const ModulePool&) = delete;

  // An idle instance loaded from the image `key` names, or nullptr.
  CUmodule take(const std::string& key);
  // Keeps `module` for the next take(key); beyond maxIdle idle instances the oldest is unloaded.
  void give(const std::string& key, CUmodule module);
  size_t idleCount() const;
  // Unloads every idle instance; returns how many.
  size_t unloadIdle();

 private:
  struct Idle {
    uint64_t since;  // give() order: the smallest is the oldest
    CUmodule module;
  };
  void unloadAll(const std::vector<CUmodule>& modules) const;

  const size_t maxIdle_;
  const Unload unload_;
  mutable std::mutex mutex_;
  uint64_t clock_ = 0;
  std::multimap<std::string, Idle> idle_;
};

}  // namespace tally::server::gpu
