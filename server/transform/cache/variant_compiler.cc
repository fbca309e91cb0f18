#include "server/transform/cache/variant_compiler.h"

#include <utility>

#include "server/transform/cache/compile_ptx.h"

namespace tally::server::transform {
namespace {

void answer(const VariantCompiler::Done& done, std::optional<std::string> cubin) {
  if (!done) return;
  try {
    done(std::move(cubin));
  } catch (...) {
    // A throwing callback must not take the worker (and tallyd) down.
  }
}

}  // namespace

VariantCompiler::VariantCompiler(const VariantCache& cache, size_t maxQueued, CompileFn compile)
    : cache_(cache),
      maxQueued_(maxQueued == 0 ? 1 : maxQueued),
      compile_(compile ? std::move(compile)
                       : CompileFn([](const VariantKey& key, std::string_view ptx, std::string& log) {
                           return compilePtx(ptx, key.arch, log);
                         })),
      worker_([this] { run(); }) {}

VariantCompiler::~VariantCompiler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool VariantCompiler::request(VariantKey key, std::string ptx, Done done) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= maxQueued_) {
      ++stats_.rejected;
      return false;
    }
    queue_.push_back(Request{std::move(key), std::move(ptx), std::move(done)});
  }
  wake_.notify_one();
  return true;
}

VariantCompiler::Stats VariantCompiler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::string VariantCompiler::lastError() const {
  std::lock_guard lock(mutex_);
  return lastError_;
}

size_t VariantCompiler::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void VariantCompiler::run() {
  while (true) {
    Request req;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        std::deque<Request> left;
        left.swap(queue_);
        stats_.cancelled += left.size();
        lock.unlock();
        for (auto& r : left) answer(r.done, std::nullopt);
        return;
      }
      req = std::move(queue_.front());
      queue_.pop_front();
    }

    if (auto hit = cache_.find(req.key)) {
      {
        std::lock_guard lock(mutex_);
        ++stats_.hits;
      }
      answer(req.done, std::move(hit));
      continue;
    }

    std::string log;
    std::optional<std::string> cubin;
    try {
      cubin = compile_(req.key, req.ptx, log);
    } catch (const std::exception& e) {
      log = std::string("compile threw: ") + e.what();
    } catch (...) {
      log = "compile threw";
    }
    std::string storeError;
    bool stored = cubin && cache_.store(req.key, *cubin, storeError);
    {
      std::lock_guard lock(mutex_);
      ++stats_.compiles;
      if (!cubin) {
        ++stats_.compileFailures;
        lastError_ = req.key.fileName() + " (" + req.key.variant + ", " + req.key.arch + "): " + log;
      } else if (!stored) {
        ++stats_.storeFailures;
        lastError_ = storeError;
      }
    }
    answer(req.done, std::move(cubin));
  }
}

}  // namespace tally::server::transform
