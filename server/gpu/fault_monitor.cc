#include "server/gpu/fault_monitor.h"

#include "server/gpu/cuda_check.h"
#include "server/gpu/gpu.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

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

// ---- evidence ----------------------------------------------------------------------------------

void FaultEvidence::noteLaunch(Clock::time_point now) {
  // Order: the window opens before the launch counts, so a reader never sees an unsettled launch
  // without a start time.
  if (!unsettled()) firstUnsettledNs_.store(now.time_since_epoch().count(), std::memory_order_release);
  lastLaunchNs_.store(now.time_since_epoch().count(), std::memory_order_release);
  launches_.fetch_add(1, std::memory_order_acq_rel);
}

void FaultEvidence::noteSettled(uint64_t sequence) {
  uint64_t seen = settled_.load(std::memory_order_acquire);
  while (seen < sequence && !settled_.compare_exchange_weak(seen, sequence, std::memory_order_acq_rel)) {
  }
}

std::optional<FaultEvidence::Clock::time_point> FaultEvidence::unsettledSince() const {
  if (!unsettled()) return std::nullopt;
  return Clock::time_point(Clock::duration(firstUnsettledNs_.load(std::memory_order_acquire)));
}

Suspicion suspicionOf(const std::vector<std::shared_ptr<FaultEvidence>>& tenants) {
  Suspicion s;
  FaultEvidence::Clock::time_point oldest{}, runnerUp = FaultEvidence::Clock::time_point::max();
  for (const auto& t : tenants) {
    auto since = t->unsettledSince();
    if (!since) continue;
    s.suspects.emplace(t->tenant(), t->name());
    if (!s.culprit || *since < oldest) {
      if (s.culprit) runnerUp = oldest;
      s.culprit = t->tenant();
      oldest = *since;
    } else {
      runnerUp = std::min(runnerUp, *since);
    }
  }
  s.clear = s.culprit && (s.suspects.size() == 1 || runnerUp - oldest >= kClearMargin);
  return s;
}

// ---- the monitor -------------------------------------------------------------------------------

FaultMonitor::FaultMonitor(Options options, std::vector<Gpu*> gpus, OnFault onFault)
    : options_(options), gpus_(std::move(gpus)), onFault_(std::move(onFault)) {
  thread_ = std::thread([this] { run(); });
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
  tenants_[tenant] = evidence;
  return evidence;
}

void FaultMonitor::leave(uint64_t tenant) {
  std::lock_guard lock(mutex_);
  tenants_.erase(tenant);
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
          names += fmt::format("; work unfinished for {:.2f} ms, last launch {:.2f} ms ago", ms(*it->second->unsettledSince()),
                               ms(it->second->lastLaunch()));
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

void FaultMonitor::probeGpus() {
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
