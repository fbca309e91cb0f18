#include "server/session/library_object_table.h"

#include <algorithm>

namespace tally::server::session {

bool LibraryObjectTable::insert(uint64_t id, LibraryObject object) {
  if (objects_.size() >= maxObjects_) return false;
  if (!objects_.emplace(id, object).second) return false;
  order_.push_back(id);
  return true;
}

LibraryObject* LibraryObjectTable::find(uint64_t id, uint32_t type) {
  auto it = objects_.find(id);
  return it != objects_.end() && it->second.type == type ? &it->second : nullptr;
}

bool LibraryObjectTable::erase(uint64_t id) {
  if (objects_.erase(id) == 0) return false;
  // Destroys mostly hit recent objects (a descriptor per call): search from the back.
  auto it = std::find(order_.rbegin(), order_.rend(), id);
  if (it != order_.rend()) order_.erase(std::next(it).base());
  return true;
}

std::vector<LibraryObject> LibraryObjectTable::takeAll() {
  std::vector<LibraryObject> all;
  all.reserve(objects_.size());
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    auto found = objects_.find(*it);
    if (found != objects_.end()) all.push_back(found->second);
  }
  objects_.clear();
  order_.clear();
  return all;
}

}  // namespace tally::server::session
