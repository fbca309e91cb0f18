#include "server/transform/cache/variant_store.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "server/transform/cache/compile_ptx.h"
#include "server/transform/variant_module.h"

namespace tally::server::transform {
namespace {

// How long kWait lets a tenant's module load wait for its variants before loading the original.
constexpr auto kWaitLimit = std::chrono::minutes(2);

// The VariantCompiler's compile step for tallyd: transform into the key's family, then compile.
std::optional<std::string> transformAndCompile(const VariantKey& key, std::string_view ptx, std::string& log) {
  auto started = std::chrono::steady_clock::now();
  const VariantFamily family =
      key.variant == familyName(VariantFamily::kHighPriority) ? VariantFamily::kHighPriority : VariantFamily::kBestEffort;
  VariantModule variants = buildVariantModule(ptx, family);
  if (!variants.ok) {
    log = variants.error;
    return std::nullopt;
  }
  std::optional<std::string> cubin = compilePtx(variants.ptx, key.arch, log);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  if (cubin) {
    spdlog::info("kernel variants compiled for {}: {} sliced, {} PTB, {} chained, {} left alone, {} ms", key.arch,
                 variants.sliced, variants.ptb, variants.chained, variants.skipped.size(), ms);
    for (const std::string& s : variants.skipped) spdlog::debug("  not transformed: {}", s);
  }
  return cubin;
}

}  // namespace

VariantStore::VariantStore(std::filesystem::path cacheDir, int driverVersion, Mode mode)
    : driverVersion_(driverVersion), mode_(mode), cache_(std::move(cacheDir)), compiler_(cache_, 64, transformAndCompile) {}

std::shared_ptr<const std::string> VariantStore::variantsFor(const std::string& ptx, const std::string& arch,
                                                            VariantFamily family) {
  VariantKey key{hash::contentHash(ptx.data(), ptx.size()), familyName(family), kTransformerVersion, driverVersion_,
                 arch};
  std::string name = key.fileName();
  std::unique_lock lock(mutex_);
  auto [it, inserted] = entries_.try_emplace(name);
  if (inserted) {
    // Compiled by an earlier run: a file read, no need to make this load run the original.
    if (auto cached = cache_.find(key)) {
      it->second.state = State::kReady;
      it->second.cubin = std::make_shared<const std::string>(std::move(*cached));
      return it->second.cubin;
    }
    lock.unlock();
    bool queued = compiler_.request(std::move(key), ptx, [this, name](std::optional<std::string> cubin) {
      finish(name, std::move(cubin));
    });
    lock.lock();
    if (!queued) {  // queue full: the original runs now, a later load asks again
      entries_.erase(name);
      return nullptr;
    }
  }
  if (mode_ == Mode::kWait) {
    settled_.wait_for(lock, kWaitLimit, [&] { return entries_[name].state != State::kPending; });
  }
  const Entry& e = entries_[name];
  return e.state == State::kReady ? e.cubin : nullptr;
}

void VariantStore::finish(const std::string& name, std::optional<std::string> cubin) {
  if (!cubin) spdlog::debug("no kernel variants ({}): {}", name, compiler_.lastError());
  {
    std::lock_guard lock(mutex_);
    Entry& e = entries_[name];
    e.state = cubin ? State::kReady : State::kNone;
    if (cubin) e.cubin = std::make_shared<const std::string>(std::move(*cubin));
  }
  settled_.notify_all();
}

VariantStore::Stats VariantStore::stats() const {
  Stats s;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [name, e] : entries_) {
      if (e.state == State::kReady) ++s.ready;
      if (e.state == State::kPending) ++s.pending;
      if (e.state == State::kNone) ++s.none;
    }
  }
  s.compiler = compiler_.stats();
  return s;
}

}  // namespace tally::server::transform
