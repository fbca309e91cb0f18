// Answers to cuDNN size queries (cudnnGet*WorkspaceSize, *ReserveSpaceSize, *SizeInBytes), kept
// in the client. PyTorch asks them again at every step, on descriptors it creates afresh each
// time (a ResNet-50 training step: three per batch-norm layer, 160 round trips), yet the answer
// depends only on the arguments and on what the descriptors named hold. So a descriptor is known
// here by its contents (the cudnnSet* calls made on it, in order), and a query is keyed by its
// argument bytes plus the contents of every descriptor it names.
//
// Only descriptor types that nothing but cudnnSet* calls change take part (the generator decides:
// schema/codegen/gen_library_stubs.py, cache_role). One connection's tallyd answers every query,
// so an answer stays true for the life of the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tally::client::library {

// What a generated call does for the cache.
enum class CacheRole : uint8_t {
  kNone,
  kSizeQuery,          // answer may be cached
  kSetsDescriptor,     // its first argument's contents change
  kDestroysDescriptor  // its first argument is gone
};

// A descriptor named by a call: its id and where the id lies in the call's argument bytes.
struct NamedDescriptor {
  uint64_t id = 0;
  size_t offset = 0;
};

// The argument bytes with every named descriptor's id zeroed: descriptors are compared by what
// they hold, never by id (PyTorch's are new at every step).
std::string withoutIds(const std::string& args, std::span<const NamedDescriptor> named);

class AnswerCache {
 public:
  static AnswerCache& get();

  // A descriptor's contents grew by one cudnnSet* / cudnnDerive* call: the function, its
  // argument bytes (ids zeroed) and the contents of the other descriptors it names.
  void noteSet(uint64_t descriptor, uint32_t function, const std::string& argsWithoutIds,
               std::span<const NamedDescriptor> others);
  void forget(uint64_t descriptor);

  // The key of a query: nullopt when a named descriptor's contents are too large to track.
  std::optional<std::string> key(uint32_t function, const std::string& argsWithoutIds,
                                 std::span<const NamedDescriptor> named);
  std::optional<std::string> answer(const std::string& key);
  void remember(const std::string& key, const std::string& answer);

  // Bounds: past them contents stop being tracked (the descriptor's queries go to tallyd) and
  // the answers start over.
  static constexpr size_t kMaxContentBytes = 4096;
  static constexpr size_t kMaxAnswers = 16384;

 private:
  std::optional<std::string> keyLocked(uint32_t function, const std::string& argsWithoutIds,
                                       std::span<const NamedDescriptor> named);

  std::mutex mutex_;
  std::unordered_map<uint64_t, std::string> contents_;  // absent: never set (the type's default)
  std::unordered_map<std::string, std::string> answers_;
};

}  // namespace tally::client::library
