// Host callbacks that go through tallyd's HostFuncReady messages (TCP, or no shared memory):
// the wire carries only an id this table issued, never a code address. tallyd (or anyone on a
// plain-TCP path) can at worst name an id we issued; anything else is refused, so a hostile
// peer cannot make this process jump to an address of its choosing.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace tally::client {

class CallbackTable {
 public:
  // Keeps `callback` (the application's function and its userData, bound) under a fresh id.
  uint64_t issue(std::function<void()> callback);
  // The callback issued under `id`, removed from the table (each runs once); nullopt when
  // `id` was never issued or already ran.
  std::optional<std::function<void()>> take(uint64_t id);
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  uint64_t nextId_ = 1;
  std::unordered_map<uint64_t, std::function<void()>> callbacks_;
};

}  // namespace tally::client
