#include "server/session/ipc_registry.h"

#include <sys/random.h>

#include <cerrno>
#include <stdexcept>

namespace tally::server::session {

namespace {

std::string keyOf(std::span<const uint8_t> bytes) { return std::string(bytes.begin(), bytes.end()); }

}  // namespace

// From the kernel's CSPRNG: a handle is the only thing that stands between a tenant and another
// tenant's memory, so it must not be predictable from earlier handles.
IpcHandleBytes IpcRegistry::randomHandle() {
  IpcHandleBytes bytes{};
  size_t filled = 0;
  while (filled < bytes.size()) {
    ssize_t n = ::getrandom(bytes.data() + filled, bytes.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("getrandom failed for an IPC handle");
    filled += static_cast<size_t>(n);
  }
  return bytes;
}

void IpcRegistry::purgeExpired() {
  std::erase_if(memory_, [](const auto& entry) {
    auto grant = entry.second.lock();
    return grant == nullptr || !grant->live.load();
  });
  std::erase_if(events_, [](const auto& entry) { return entry.second.expired(); });
}

void IpcRegistry::publish(const std::shared_ptr<IpcMemoryGrant>& grant) {
  std::lock_guard lock(mutex_);
  purgeExpired();
  do grant->handle = randomHandle();
  while (memory_.count(keyOf(grant->handle)) != 0);
  memory_.emplace(keyOf(grant->handle), grant);
}

void IpcRegistry::publish(const std::shared_ptr<IpcEventGrant>& grant) {
  std::lock_guard lock(mutex_);
  purgeExpired();
  do grant->handle = randomHandle();
  while (events_.count(keyOf(grant->handle)) != 0);
  events_.emplace(keyOf(grant->handle), grant);
}

std::shared_ptr<IpcMemoryGrant> IpcRegistry::memory(std::span<const uint8_t> handle) {
  if (handle.size() != kIpcHandleBytes) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = memory_.find(keyOf(handle));
  if (it == memory_.end()) return nullptr;
  auto grant = it->second.lock();
  return grant != nullptr && grant->live.load() ? grant : nullptr;
}

std::shared_ptr<IpcEventGrant> IpcRegistry::event(std::span<const uint8_t> handle) {
  if (handle.size() != kIpcHandleBytes) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = events_.find(keyOf(handle));
  return it == events_.end() ? nullptr : it->second.lock();
}

size_t IpcRegistry::size() {
  std::lock_guard lock(mutex_);
  purgeExpired();
  return memory_.size() + events_.size();
}

}  // namespace tally::server::session
