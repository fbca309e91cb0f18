// Compiles kernel variants off the caller's thread: one worker thread, a bounded queue and the
// on-disk VariantCache (hit: the cached cubin; miss: compile, store, then answer).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "server/transform/cache/variant_cache.h"

namespace tally::server::transform {

class VariantCompiler {
 public:
  using Done = std::function<void(std::optional<std::string> cubin)>;
  // (key, ptx, log) -> cubin; by default compilePtx of the PTX as it is, for key.arch. tallyd's
  // (VariantStore) first transforms the PTX into the family key.variant names; tests put theirs.
  using CompileFn = std::function<std::optional<std::string>(const VariantKey&, std::string_view, std::string&)>;

  struct Stats {
    uint64_t hits = 0;           // answered from the cache
    uint64_t compiles = 0;       // compile attempts (misses)
    uint64_t compileFailures = 0;
    uint64_t storeFailures = 0;  // compiled but not written (still answered)
    uint64_t rejected = 0;       // refused: queue full or shutting down
    uint64_t cancelled = 0;      // still queued at destruction (answered nullopt)
  };

  // `cache` must outlive the compiler.
  explicit VariantCompiler(const VariantCache& cache, size_t maxQueued = 64, CompileFn compile = {});
  // Finishes the request in progress, answers every request still queued with nullopt, joins.
  ~VariantCompiler();
  VariantCompiler(const VariantCompiler&) = delete;
  VariantCompiler& operator=(const VariantCompiler&) = delete;

  // Queues a request; `done` later runs exactly once on the worker thread with the cubin, or
  // nullopt if compiling failed (lastError() says why) or the compiler was destroyed first.
  // Never blocks on compilation. Returns false, without calling `done`, when the queue holds
  // maxQueued requests already (the caller keeps running the original kernel and may retry).
  bool request(VariantKey key, std::string ptx, Done done);

  Stats stats() const;
  std::string lastError() const;  // last compile or store error, empty if none
  size_t queued() const;

 private:
  struct Request {
    VariantKey key;
    std::string ptx;
    Done done;
  };
  void run();

  const VariantCache& cache_;
  const size_t maxQueued_;
  CompileFn compile_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Request> queue_;
  bool stopping_ = false;
  Stats stats_;
  std::string lastError_;
  std::thread worker_;  // last: started once everything above is constructed
};

}  // namespace tally::server::transform
