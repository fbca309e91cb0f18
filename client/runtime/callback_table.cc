#include "client/runtime/callback_table.h"

namespace tally::client {

uint64_t CallbackTable::issue(std::function<void()> callback) {
  std::lock_guard lock(mutex_);
  uint64_t id = nextId_++;
  callbacks_.emplace(id, std::move(callback));
  return id;
}

std::optional<std::function<void()>> CallbackTable::take(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = callbacks_.find(id);
  if (it == callbacks_.end()) return std::nullopt;
  std::function<void()> callback = std::move(it->second);
  callbacks_.erase(it);
  return callback;
}

size_t CallbackTable::size() const {
  std::lock_guard lock(mutex_);
  return callbacks_.size();
}

}  // namespace tally::client
