#include "client/library/answer_cache.h"

namespace tally::client::library {

namespace {

// Contents longer than the bound are marked so (a value no set call can produce).
const std::string& untracked() {
  static const std::string kUntracked(1, '\xff');
  return kUntracked;
}

void appendU32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

}  // namespace

std::string withoutIds(const std::string& args, std::span<const NamedDescriptor> named) {
  std::string out = args;
  for (const NamedDescriptor& d : named) {
    if (d.offset + sizeof d.id <= out.size()) out.replace(d.offset, sizeof d.id, sizeof d.id, '\0');
  }
  return out;
}

AnswerCache& AnswerCache::get() {
  static auto* cache = new AnswerCache();  // used from library calls made during exit
  return *cache;
}

void AnswerCache::noteSet(uint64_t descriptor, uint32_t function, const std::string& argsWithoutIds,
                          std::span<const NamedDescriptor> others) {
  std::lock_guard lock(mutex_);
  std::optional<std::string> change = keyLocked(function, argsWithoutIds, others);
  std::string& c = contents_[descriptor];
  if (c == untracked()) return;
  if (!change || c.size() + change->size() > kMaxContentBytes) {
    c = untracked();
    return;
  }
  c += *change;
}

void AnswerCache::forget(uint64_t descriptor) {
  std::lock_guard lock(mutex_);
  contents_.erase(descriptor);
}

std::optional<std::string> AnswerCache::key(uint32_t function, const std::string& argsWithoutIds,
                                            std::span<const NamedDescriptor> named) {
  std::lock_guard lock(mutex_);
  return keyLocked(function, argsWithoutIds, named);
}

std::optional<std::string> AnswerCache::keyLocked(uint32_t function, const std::string& argsWithoutIds,
                                                  std::span<const NamedDescriptor> named) {
  std::string k;
  appendU32(k, function);
  appendU32(k, static_cast<uint32_t>(argsWithoutIds.size()));
  k += argsWithoutIds;
  for (const NamedDescriptor& d : named) {
    auto it = contents_.find(d.id);
    // What the descriptor holds stands for it, in the order named (length first: two
    // descriptors' contents cannot run into each other).
    const std::string& c = it == contents_.end() ? std::string() : it->second;
    if (c == untracked()) return std::nullopt;
    appendU32(k, static_cast<uint32_t>(c.size()));
    k += c;
  }
  return k;
}

std::optional<std::string> AnswerCache::answer(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = answers_.find(key);
  if (it == answers_.end()) return std::nullopt;
  return it->second;
}

void AnswerCache::remember(const std::string& key, const std::string& answer) {
  std::lock_guard lock(mutex_);
  if (answers_.size() >= kMaxAnswers) answers_.clear();
  answers_[key] = answer;
}

}  // namespace tally::client::library
