// tallyd's view of the kernel variants: asked when a tenant loads a module with PTX, it answers
// with the compiled variant module of the tenant's family (the original kernels plus their
// sliced and PTB variants, or their chained ones: server/transform/variant_module.h) once there
// is one. Transforming and compiling happen on the VariantCompiler's thread, never on a
// tenant's; results persist in the VariantCache.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/hash/content_hash.h"
#include "server/transform/cache/variant_cache.h"
#include "server/transform/cache/variant_compiler.h"
#include "server/transform/variant_module.h"

namespace tally::server::transform {

class VariantStore {
 public:
  enum class Mode {
    kLazy,  // a miss queues the compilation and answers "none yet": the original kernels run
    kWait,  // a miss compiles before answering (the stress mode's test aid: variants from the start)
  };
  struct Stats {
    uint64_t ready = 0;    // modules with variants, in memory
    uint64_t pending = 0;  // being compiled
    uint64_t none = 0;     // modules without variants (no eligible kernel, compile failure)
    VariantCompiler::Stats compiler;
  };

  VariantStore(std::filesystem::path cacheDir, int driverVersion, Mode mode);

  // The compiled variant module of `family` for `ptx` on `arch` ("sm_90"), or nullptr: none yet
  // (kLazy) or none at all. Thread-safe.
  std::shared_ptr<const std::string> variantsFor(const std::string& ptx, const std::string& arch,
                                                 VariantFamily family);

  Stats stats() const;

 private:
  enum class State { kPending, kReady, kNone };
  struct Entry {
    State state = State::kPending;
    std::shared_ptr<const std::string> cubin;
  };

  void finish(const std::string& name, std::optional<std::string> cubin);

  const int driverVersion_;
  const Mode mode_;
  VariantCache cache_;
  mutable std::mutex mutex_;
  std::condition_variable settled_;
  std::map<std::string, Entry> entries_;  // by VariantKey::fileName()
  VariantCompiler compiler_;              // last: its thread calls finish()
};

}  // namespace tally::server::transform
