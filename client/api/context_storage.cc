#include "client/api/context_storage.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace tally::client::context_storage {
namespace {

struct Entry {
  void* value;
  Destructor destructor;
};

class Storage {
 public:
  static Storage& get() {
    static auto* storage = new Storage();  // runtimes remove their values from exit handlers
    return *storage;
  }

  void put(CUcontext ctx, void* key, Entry entry) {
    std::lock_guard lock(mutex_);
    entries_[{ctx, key}] = entry;
  }

  bool remove(CUcontext ctx, void* key) {
    std::lock_guard lock(mutex_);
    return entries_.erase({ctx, key}) == 1;
  }

  bool find(CUcontext ctx, void* key, void*& value) {
    std::lock_guard lock(mutex_);
    auto it = entries_.find({ctx, key});
    if (it == entries_.end()) return false;
    value = it->second.value;
    return true;
  }

  std::vector<std::pair<void*, Entry>> take(CUcontext ctx) {
    std::vector<std::pair<void*, Entry>> taken;
    std::lock_guard lock(mutex_);
    for (auto it = entries_.lower_bound({ctx, nullptr}); it != entries_.end() && it->first.first == ctx;) {
      taken.emplace_back(it->first.second, it->second);
      it = entries_.erase(it);
    }
    return taken;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<CUcontext, void*>, Entry> entries_;
};

CUcontext resolve(CUcontext ctx) {
  if (ctx != nullptr) return ctx;
  CUcontext current = nullptr;
  cuCtxGetCurrent(&current);
  return current;
}

}  // namespace

CUresult put(CUcontext ctx, void* key, void* value, Destructor destructor) {
  ctx = resolve(ctx);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Storage::get().put(ctx, key, {value, destructor});
  return CUDA_SUCCESS;
}

CUresult remove(CUcontext ctx, void* key) {
  Storage::get().remove(resolve(ctx), key);
  return CUDA_SUCCESS;
}

// A miss is an error the runtime expects (it asks before it has stored anything).
CUresult get(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Storage::get().find(resolve(ctx), key, *value) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

void release(CUcontext ctx) {
  for (auto& [key, entry] : Storage::get().take(ctx)) {
    if (entry.destructor != nullptr) entry.destructor(ctx, key, entry.value);
  }
}

}  // namespace tally::client::context_storage
