// One tenant's driver JIT links (cuLinkCreate … cuLinkDestroy), under the ids its client chose.
// The driver keeps pointers into a link's option arrays and log buffers until the link is
// destroyed, so each link owns them and lives at a stable address. Bookkeeping only; the
// handlers (api/jit_link_api.cc) and Tenant::release call the driver.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::session {

struct LinkState {
  gpu::Gpu* gpu = nullptr;
  CUlinkState state = nullptr;
  std::vector<CUjit_option> options;
  std::vector<void*> values;
  std::vector<char> infoLog;
  std::vector<char> errorLog;
  // What the tenant has been shown of each log, and the driver buffer's text it was built from:
  // should the driver start its buffer over at a later step, the application still sees the
  // earlier lines, as its own buffer would keep them natively.
  std::string infoShown, infoSeen, errorShown, errorSeen;
  int wallTimeSlot = -1;  // index into values the driver writes the wall time to; -1: not asked
};

class LinkTable {
 public:
  LinkState* find(uint64_t id) {
    auto it = links_.find(id);
    return it == links_.end() ? nullptr : it->second.get();
  }
  bool contains(uint64_t id) const { return links_.count(id) != 0; }
  void add(uint64_t id, std::unique_ptr<LinkState> link) { links_.emplace(id, std::move(link)); }
  std::unique_ptr<LinkState> take(uint64_t id) {
    auto it = links_.find(id);
    if (it == links_.end()) return nullptr;
    std::unique_ptr<LinkState> link = std::move(it->second);
    links_.erase(it);
    return link;
  }
  std::vector<std::unique_ptr<LinkState>> takeAll() {
    std::vector<std::unique_ptr<LinkState>> all;
    for (auto& [id, link] : links_) all.push_back(std::move(link));
    links_.clear();
    return all;
  }
  size_t size() const { return links_.size(); }

 private:
  std::unordered_map<uint64_t, std::unique_ptr<LinkState>> links_;
};

}  // namespace tally::server::session
