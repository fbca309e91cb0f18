#include "server/gpu/fault_monitor.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace tally::server::gpu {

bool isStickyError(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_TENSOR_MEMORY_LEAK:
      return true;
    default:
      return false;
  }
}

Suspicion suspicionOf(const std::vector<std::shared_ptr<FaultEvidence>>& tenants) {
  Suspicion s;
  std::vector<std::pair<FaultEvidence::Clock::time_point, const FaultEvidence*>> all, running;
  for (const auto& t : tenants) {
    auto since = t->unsettledSince();
    if (!since) continue;
    s.suspects.emplace(t->tenant(), t->name());
    all.emplace_back(*since, t.get());
    if (t->kernelsMayRun()) running.emplace_back(*since, t.get());
  }
  auto& pool = running.empty() ? all : running;
  if (pool.empty()) return s;
  std::sort(pool.begin(), pool.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  s.culprit = pool.front().second->tenant();
  s.clear = pool.size() == 1 || pool[1].first - pool.front().first >= kClearMargin;
  if (s.clear) return s;
  // Work that started together: of those, the one running code never seen to finish, if only
  // one does (still not a clear blame).
  std::vector<const FaultEvidence*> unproven;
  for (const auto& [since, t] : pool) {
    if (since - pool.front().first < kClearMargin && t->runsUnprovenCode()) unproven.push_back(t);
  }
  if (unproven.size() == 1) s.culprit = unproven.front()->tenant();
  return s;
}

// ---- the monitor -------------------------------------------------------------------------------

FaultMonitor::FaultMonitor(Options options, std::vector<Gpu*> gpus, OnFault onFault)
    : options_(options), gpus_(std::move(gpus)), onFault_(std::move(onFault)) {
  if (!gpus_.empty()) allocateMarkWords();
  thread_ = std::thread([this] { run(); });
}

// Kept for the life of the process: a tenant's last mark may still be on its way when the monitor
// goes, and the words are small.
void FaultMonitor::allocateMarkWords() {
  // Portable and mapped: one address for every GPU's context (unified addressing).
  const size_t bytes = kMarkBlock * kMarkBlocks * sizeof(uint32_t);
  void* host = nullptr;
  CUdeviceptr device = 0;
  cuCtxPushCurrent(gpus_.front()->context());
  CUresult r = cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  if (r == CUDA_SUCCESS) r = cuMemHostGetDevicePointer(&device, host, 0);
  CUcontext popped = nullptr;
  cuCtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS) {
    spdlog::warn("fault monitor: no mapped words for kernel marks ({}); a fault's blame rests on timing alone",
                 describe(r));
    if (host != nullptr) cuMemFreeHost(host);
    return;
  }
  std::memset(host, 0, bytes);
  markHost_ = static_cast<uint32_t*>(host);
  markDevice_ = device;
  markBlockUsed_.assign(kMarkBlocks, false);
}

MarkWords FaultMonitor::takeMarkBlock(uint64_t tenant) {
  for (size_t b = 0; b < markBlockUsed_.size(); ++b) {
    if (markBlockUsed_[b]) continue;
    markBlockUsed_[b] = true;
    markBlockOf_[tenant] = b;
    return MarkWords{markHost_ + b * kMarkBlock, markDevice_ + b * kMarkBlock * sizeof(uint32_t), kMarkBlock};
  }
  return {};
}

CUresult FaultMonitor::writeMark(CUstream stream, CUdeviceptr address, uint32_t value) {
  return cuStreamWriteValue32(stream, address, value, CU_STREAM_WRITE_VALUE_DEFAULT);
}

FaultMonitor::~FaultMonitor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<FaultEvidence> FaultMonitor::enroll(uint64_t tenant, const std::string& name) {
  auto evidence = std::make_shared<FaultEvidence>(tenant, name);
  std::lock_guard lock(mutex_);
  evidence->attachMarks(takeMarkBlock(tenant), shared_);
  tenants_[tenant] = evidence;
  shared_->store(tenants_.size() > 1, std::memory_order_relaxed);
  return evidence;
}

void FaultMonitor::leave(uint64_t tenant) {
  std::lock_guard lock(mutex_);
  tenants_.erase(tenant);
  shared_->store(tenants_.size() > 1, std::memory_order_relaxed);
  // Its streams were synchronized before it left: no mark of its can still land in the block.
  if (auto it = markBlockOf_.find(tenant); it != markBlockOf_.end()) {
    markBlockUsed_[it->second] = false;
    markBlockOf_.erase(it);
  }
}

CUresult FaultMonitor::statusFor(uint64_t tenant, CUresult status) {
  if (!faulted_.load(std::memory_order_acquire)) {
    if (!isStickyError(status)) return status;
    declare(status, std::nullopt, "observed by a call of tenant " + std::to_string(tenant));
  }
  // Calls that did not need the GPU (handle lookups) still succeed; any failure now is the fault's.
  if (status == CUDA_SUCCESS) return status;
  std::lock_guard lock(mutex_);
  return verdict_->culprits.count(tenant) != 0 ? verdict_->code : kContextResetError;
}

void FaultMonitor::declare(CUresult code, std::optional<uint64_t> culprit, const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (verdict_) return;
    FaultVerdict v;
    v.code = code;
    v.at = std::chrono::system_clock::now();
    v.tenantsAffected = tenants_.size();
    if (culprit) {
      auto it = tenants_.find(*culprit);
      v.culprits.emplace(*culprit, it != tenants_.end() ? it->second->name() : std::string("?"));
      v.certain = true;
    } else {
      std::vector<std::shared_ptr<FaultEvidence>> all;
      for (auto& [id, e] : tenants_) all.push_back(e);
      Suspicion s = suspicionOf(all);
      if (s.culprit) v.culprits.emplace(*s.culprit, s.suspects.at(*s.culprit));
      v.certain = s.clear;
      for (auto& [id, name] : s.suspects) {
        if (v.culprits.count(id) == 0) v.alsoSuspected.emplace(id, name);
      }
    }
    // Each named tenant with how long its work had been unfinished and since its last launch:
    // what the blame rests on, for the operator.
    auto now = FaultEvidence::Clock::now();
    auto list = [&](const std::map<uint64_t, std::string>& tenants) {
      std::string names;
      for (auto& [id, name] : tenants) {
        names += fmt::format("{}{} ({}", names.empty() ? "" : ", ", id, name);
        auto it = tenants_.find(id);
        if (it != tenants_.end() && it->second->unsettledSince()) {
          auto ms = [&](FaultEvidence::Clock::time_point t) { return std::chrono::duration<double, std::milli>(now - t).count(); };
          names += fmt::format("; work unfinished for {:.2f} ms, last launch {:.2f} ms ago, {}{}",
                               ms(*it->second->unsettledSince()), ms(it->second->lastLaunch()),
                               it->second->kernelsMayRun() ? "its kernels may have been running" : "its kernels had finished",
                               it->second->runsUnprovenCode() ? ", code not yet seen to finish" : "");
        }
        names += ")";
      }
      return names;
    };
    v.reason = fmt::format("{} in the shared context ({}); faulting tenant: {}", describe(code), reason,
                           v.culprits.empty() ? "unknown (no tenant had work on the GPU)" : list(v.culprits));
    if (!v.alsoSuspected.empty()) v.reason += fmt::format("; also had work running: {}", list(v.alsoSuspected));
    if (!v.culprits.empty() && !v.certain) v.reason += " (blame uncertain: not counted towards a quarantine)";
    spdlog::error("GPU fault: {}; {} tenant(s) affected; tallyd tells every tenant and starts over", v.reason,
                  v.tenantsAffected);
    verdict_ = std::move(v);
    faulted_.store(true, std::memory_order_release);
  }
  wake_.notify_all();
}

std::optional<FaultVerdict> FaultMonitor::verdict() const {
  std::lock_guard lock(mutex_);
  return verdict_;
}

bool quietFor(const std::map<uint64_t, std::shared_ptr<FaultEvidence>>& tenants, FaultEvidence::Clock::time_point now,
              FaultEvidence::Clock::duration quiet) {
  return std::none_of(tenants.begin(), tenants.end(), [&](const auto& t) { return now - t.second->lastLaunch() < quiet; });
}

void FaultMonitor::probeGpus() {
  {
    std::lock_guard lock(mutex_);
    if (!quietFor(tenants_, FaultEvidence::Clock::now(), options_.probeInterval)) return;
  }
  for (Gpu* g : gpus_) {
    CUresult r = g->probe();
    if (isStickyError(r)) {
      declare(r, std::nullopt, fmt::format("found by the health probe of GPU {}", g->ordinal()));
      return;
    }
  }
}

void FaultMonitor::checkTimeouts() {
  if (options_.kernelTimeoutSeconds <= 0) return;
  auto limit = std::chrono::duration_cast<FaultEvidence::Clock::duration>(
      std::chrono::duration<double>(options_.kernelTimeoutSeconds));
  auto now = FaultEvidence::Clock::now();
  std::optional<uint64_t> oldest;
  FaultEvidence::Clock::time_point oldestSince = now;
  {
    std::lock_guard lock(mutex_);
    for (auto& [id, e] : tenants_) {
      auto since = e->unsettledSince();
      if (since && now - *since > limit && *since < oldestSince) {
        oldest = id;
        oldestSince = *since;
      }
    }
  }
  if (oldest) {
    declare(CUDA_ERROR_LAUNCH_TIMEOUT, oldest,
            fmt::format("its work ran longer than kernel_timeout_s = {} s", options_.kernelTimeoutSeconds));
  }
}

void FaultMonitor::run() {
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, options_.probeInterval, [&] { return stopping_ || (verdict_ && !handedOver_); });
      if (stopping_) return;
    }
    if (!faulted_.load(std::memory_order_acquire)) {
      probeGpus();
      checkTimeouts();
    }
    std::optional<FaultVerdict> v;
    {
      std::lock_guard lock(mutex_);
      if (verdict_ && !handedOver_) {
        handedOver_ = true;
        v = verdict_;
      }
    }
    if (v && onFault_) onFault_(*v);
  }
}

}  // namespace tally::server::gpu
