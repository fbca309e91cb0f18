#include "server/scheduler/priority_policy.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <chrono>
#include <ctime>

#include "server/scheduler/passthrough_policy.h"

namespace tally::server::scheduler {
namespace {

constexpr size_t kWordsPerGpu = 16384;
constexpr auto kMonitorPeriod = std::chrono::microseconds(10);

Nanos now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string shapeKey(const KernelLaunch& k) {
  const auto& s = k.shape;
  return *k.profileKey + "/" + std::to_string(s.grid[0]) + "x" + std::to_string(s.grid[1]) + "x" +
         std::to_string(s.grid[2]) + "/" + std::to_string(s.block[0]) + "x" + std::to_string(s.block[1]) + "x" +
         std::to_string(s.block[2]) + "/" + std::to_string(s.sharedMem);
}

// Blocks of `f` one wave holds at this shape (0: it cannot run it).
uint64_t waveBlocks(CUfunction f, const gpu::Gpu& g, const gpu::LaunchShape& shape) {
  int perSm = 0;
  int threads = static_cast<int>(shape.block[0] * shape.block[1] * shape.block[2]);
  if (f == nullptr || cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, f, threads, shape.sharedMem) != CUDA_SUCCESS) {
    return 0;
  }
  return uint64_t(std::max(perSm, 0)) * g.multiprocessors();
}

std::vector<void*> pointersInto(std::vector<uint8_t>& bytes, const std::vector<std::pair<uint32_t, uint32_t>>& layout) {
  std::vector<void*> pointers;
  for (auto [offset, size] : layout) pointers.push_back(bytes.data() + offset);
  return pointers;
}

}  // namespace

// ---- mapped words ------------------------------------------------------------------------------

bool MappedWords::allocate(size_t count, std::string& error) {
  void* host = nullptr;
  if (CUresult r = cuMemHostAlloc(&host, count * sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE);
      r != CUDA_SUCCESS) {
    error = "cuMemHostAlloc of the scheduler's words: CUresult " + std::to_string(r);
    return false;
  }
  host_ = static_cast<uint32_t*>(host);
  if (CUresult r = cuMemHostGetDevicePointer(&device_, host, 0); r != CUDA_SUCCESS) {
    error = "cuMemHostGetDevicePointer of the scheduler's words: CUresult " + std::to_string(r);
    return false;
  }
  used_.assign(count, false);
  return true;
}

MappedWords::~MappedWords() {
  if (host_ != nullptr) cuMemFreeHost(host_);
}

int MappedWords::take(uint32_t initial) {
  for (size_t i = 0; i < used_.size(); ++i) {
    if (!used_[i]) {
      used_[i] = true;
      store(static_cast<int>(i), initial);
      return static_cast<int>(i);
    }
  }
  return -1;
}

void MappedWords::give(int word) {
  if (word >= 0) used_[static_cast<size_t>(word)] = false;
}

// ---- the policy --------------------------------------------------------------------------------

PriorityPolicy::PriorityPolicy(SchedulerConfig config) : config_(std::move(config)) {
  knobs_.budgetMicros = config_.budgetMicros;
  knobs_.useTransforms = config_.transforms;
  if (!config_.profilesPath.empty()) {
    std::string error;
    if (!profiles_.load(config_.profilesPath, error)) spdlog::warn("scheduler: ignoring learned durations: {}", error);
    if (profiles_.size() > 0) spdlog::info("scheduler: {} learned kernel durations from {}", profiles_.size(), config_.profilesPath);
  }
  monitor_ = std::thread([this] { monitor(); });
}

PriorityPolicy::~PriorityPolicy() {
  stopping_ = true;
  if (monitor_.joinable()) monitor_.join();
  saveProfiles();
  std::lock_guard lock(mutex_);
  for (auto& [g, s] : gpus_) {
    g->makeCurrent();
    for (auto& m : s->measuring) {
      cuEventDestroy(m.start);
      cuEventDestroy(m.end);
    }
    for (auto [a, b] : s->eventPool) {
      cuEventDestroy(a);
      cuEventDestroy(b);
    }
  }
}

void PriorityPolicy::saveProfiles() {
  std::lock_guard lock(mutex_);
  if (config_.profilesPath.empty() || profiles_.size() == 0) return;
  std::string error;
  if (!profiles_.save(config_.profilesPath, error)) spdlog::warn("scheduler: cannot keep learned durations: {}", error);
}

std::optional<int> PriorityPolicy::streamPriority(bool highPriority, const gpu::Gpu& g) const {
  if (!config_.streamPriorities) return std::nullopt;
  return highPriority ? g.description().streamPriorityGreatest : g.description().streamPriorityLeast;
}

PriorityPolicy::GpuState* PriorityPolicy::stateFor(gpu::Gpu& g) {
  auto it = gpus_.find(&g);
  if (it != gpus_.end()) return it->second.get();
  auto s = std::make_unique<GpuState>();
  s->gpu = &g;
  s->activity = HpActivity(static_cast<Nanos>(config_.idleWindowMicros * 1000));
  g.makeCurrent();
  std::string error;
  if (!s->words.allocate(kWordsPerGpu, error)) {
    spdlog::error("scheduler on GPU {}: {}; launches pass through", g.ordinal(), error);
    return nullptr;
  }
  return gpus_.emplace(&g, std::move(s)).first->second.get();
}

int PriorityPolicy::gateFor(GpuState& s, uint64_t tenant) {
  auto it = s.gates.find(tenant);
  if (it != s.gates.end()) return it->second;
  int word = s.words.take(s.activity.gateOpen() ? 1 : 0);
  if (word >= 0) s.gates.emplace(tenant, word);
  return word;
}

void PriorityPolicy::closeGate(GpuState& s) {
  ++gateCloses_;
  for (auto& [tenant, word] : s.gates) s.words.store(word, 0);
  for (auto& [key, lane] : s.lanes) s.words.store(lane->retreat, 1);
}

void PriorityPolicy::openGate(GpuState& s) {
  // Flags first: a PTB kernel the gate lets through must not see a stale retreat.
  for (auto& [key, lane] : s.lanes) s.words.store(lane->retreat, 0);
  for (auto& [tenant, word] : s.gates) s.words.store(word, 1);
}

// ---- high priority -----------------------------------------------------------------------------

// Marks `stream` as having unfinished HP work (just queued): the monitor sees HP busy until the
// GPU writes the slot's word after that work. Closes the gate if it was open.
void PriorityPolicy::markHpWork(GpuState& s, StreamKey key, CUstream stream) {
  uint32_t issued = 0;
  int word = -1;
  {
    std::lock_guard lock(mutex_);
    if (s.activity.submitted(now()) && config_.gate) closeGate(s);
    auto [it, inserted] = s.hpSlots.try_emplace(key);
    if (inserted) it->second.word = s.words.take(0);
    word = it->second.word;
    if (word < 0) return;
    // The word is written after the work: HP stays busy until then.
    issued = ++it->second.issued;
  }
  cuStreamWriteValue32(stream, s.words.device(word), issued, CU_STREAM_WRITE_VALUE_DEFAULT);
}

CUresult PriorityPolicy::launchHighPriority(const KernelLaunch& k) {
  GpuState* s = nullptr;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(*k.gpu);
    if (s != nullptr && s->activity.submitted(now()) && config_.gate) closeGate(*s);
  }
  std::vector<void*> params = parameterPointers(k);
  CUresult r = cuLaunchKernel(k.original, k.shape.grid[0], k.shape.grid[1], k.shape.grid[2], k.shape.block[0],
                              k.shape.block[1], k.shape.block[2], k.shape.sharedMem, k.stream, params.data(), nullptr);
  if (r == CUDA_SUCCESS && s != nullptr) markHpWork(*s, {k.tenant, k.streamId}, k.stream);
  return r;
}

void PriorityPolicy::afterWork(uint64_t tenant, bool highPriority, uint64_t streamId, gpu::Gpu& g, CUstream stream) {
  if (!highPriority) return;
  GpuState* s = nullptr;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(g);
  }
  if (s != nullptr) markHpWork(*s, {tenant, streamId}, stream);
}

// ---- best effort -------------------------------------------------------------------------------

PriorityPolicy::Lane* PriorityPolicy::laneFor(GpuState& s, const KernelLaunch& k) {
  auto& slot = s.lanes[{k.tenant, k.streamId}];
  if (slot) return slot.get();
  auto lane = std::make_unique<Lane>();
  lane->tenant = k.tenant;
  k.gpu->makeCurrent();
  bool ok = cuMemAlloc(&lane->progress, sizeof(uint64_t)) == CUDA_SUCCESS &&
            cuStreamCreateWithPriority(&lane->resume, CU_STREAM_NON_BLOCKING,
                                       k.gpu->description().streamPriorityLeast) == CUDA_SUCCESS;
  lane->retreat = s.words.take(s.activity.gateOpen() ? 0 : 1);
  lane->done = s.words.take(0);
  lane->preempted = s.words.take(0);
  if (!ok || lane->retreat < 0 || lane->done < 0 || lane->preempted < 0) {
    s.endedLanes.push_back(std::move(lane));  // freed with the tenant
    s.lanes.erase({k.tenant, k.streamId});
    return nullptr;
  }
  slot = std::move(lane);
  return slot.get();
}

CUresult PriorityPolicy::enqueuePtb(GpuState& s, Lane& lane, const PtbRun& run, CUstream stream) {
  std::vector<uint8_t> params = run.params;
  std::vector<void*> pointers = pointersInto(params, run.layout);
  gpu::PtbControl control{lane.progress, s.words.device(lane.retreat)};
  if (CUresult r = gpu::launchPtb(run.ptb, run.shape, stream, {pointers.data(), pointers.size()}, run.workers, control);
      r != CUDA_SUCCESS) {
    return r;
  }
  const gpu::PtbHelpers* helpers = s.gpu->ptbHelpers();
  return helpers->launchFinished(stream, lane.progress, run.shape.blocks(), static_cast<uint32_t>(run.seq),
                                 s.words.device(lane.done), s.words.device(lane.preempted));
}

CUresult PriorityPolicy::launchBestEffort(const KernelLaunch& k) {
  std::vector<void*> params = parameterPointers(k);
  gpu::KernelParams kernelParams{params.data(), params.size()};
  std::string key = shapeKey(k);
  GpuState* s = nullptr;
  int gate = -1;
  LaunchChoice choice;
  Lane* lane = nullptr;
  PtbRun run;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(*k.gpu);
    if (s != nullptr) {
      gate = config_.gate ? gateFor(*s, k.tenant) : -1;
      KernelFacts facts;
      facts.blocks = k.shape.blocks();
      facts.originalMicros = profiles_.micros(key);
      facts.launchesSeen = profiles_.samples(key);
      facts.hasSliced = waveBlocks(k.sliced, *k.gpu, k.shape) > 0;
      facts.waveBlocks = waveBlocks(k.ptb, *k.gpu, k.shape);
      facts.hasPtb = facts.waveBlocks > 0 && k.gpu->ptbHelpers() != nullptr;
      choice = chooseLaunch(facts, knobs_);
      if (choice.kind == VariantKind::kPtb) lane = laneFor(*s, k);
      if (choice.kind == VariantKind::kPtb && lane == nullptr) choice.kind = VariantKind::kOriginal;
      if (lane != nullptr && choice.kind == VariantKind::kPtb) {
        run.seq = lane->book.add();
        run.ptb = k.ptb;
        run.shape = k.shape;
        run.params.assign(k.paramBuffer.begin(), k.paramBuffer.end());
        run.layout = *k.paramLayout;
        run.workers = {choice.workers, choice.chunk};
        run.preemptions = k.preemptions;
        lane->runs.push_back(run);
      }
      ++(choice.kind == VariantKind::kOriginal ? beOriginal_ : choice.kind == VariantKind::kSliced ? beSliced_ : bePtb_);
    }
  }
  auto waitGate = [&] {
    return gate < 0 ? CUDA_SUCCESS : cuStreamWaitValue32(k.stream, s->words.device(gate), 1, CU_STREAM_WAIT_VALUE_EQ);
  };
  if (s == nullptr) return PassthroughPolicy().launch(k);
  if (CUresult r = waitGate(); r != CUDA_SUCCESS) return r;
  switch (choice.kind) {
    case VariantKind::kSliced: {
      if (k.slicedLaunches != nullptr) k.slicedLaunches->fetch_add(1, std::memory_order_relaxed);
      const uint64_t total = k.shape.blocks(), per = gpu::sliceSize(total, choice.slices);
      for (uint64_t offset = 0; offset < total; offset += per) {
        if (offset > 0) {
          if (CUresult r = waitGate(); r != CUDA_SUCCESS) return r;  // HP work may come between slices
        }
        auto count = static_cast<uint32_t>(std::min(per, total - offset));
        if (CUresult r = gpu::launchSliceRange(k.sliced, k.shape, k.stream, kernelParams, offset, count);
            r != CUDA_SUCCESS) {
          return r;
        }
      }
      return CUDA_SUCCESS;
    }
    case VariantKind::kPtb: {
      if (k.ptbLaunches != nullptr) k.ptbLaunches->fetch_add(1, std::memory_order_relaxed);
      if (CUresult r = cuMemsetD32Async(lane->progress, 0, 2, k.stream); r != CUDA_SUCCESS) return r;
      if (CUresult r = enqueuePtb(*s, *lane, run, k.stream); r != CUDA_SUCCESS) return r;
      // The stream goes on only once the grid is complete, whatever resumes that takes.
      return cuStreamWaitValue32(k.stream, s->words.device(lane->done), static_cast<uint32_t>(run.seq),
                                 CU_STREAM_WAIT_VALUE_GEQ);
    }
    case VariantKind::kOriginal:
      break;
  }
  Measurement m;
  if (choice.measure) {
    std::lock_guard lock(mutex_);
    if (!s->eventPool.empty()) {
      std::tie(m.start, m.end) = s->eventPool.back();
      s->eventPool.pop_back();
    } else if (cuEventCreate(&m.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
               cuEventCreate(&m.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
      m.start = m.end = nullptr;
    }
  }
  if (m.start != nullptr) cuEventRecord(m.start, k.stream);
  CUresult r = cuLaunchKernel(k.original, k.shape.grid[0], k.shape.grid[1], k.shape.grid[2], k.shape.block[0],
                              k.shape.block[1], k.shape.block[2], k.shape.sharedMem, k.stream, params.data(), nullptr);
  if (m.start != nullptr) {
    cuEventRecord(m.end, k.stream);
    m.key = std::move(key);
    std::lock_guard lock(mutex_);
    s->measuring.push_back(std::move(m));
  }
  return r;
}

CUresult PriorityPolicy::launch(const KernelLaunch& k) {
  return k.highPriority ? launchHighPriority(k) : launchBestEffort(k);
}

// ---- the monitor -------------------------------------------------------------------------------

void PriorityPolicy::pollGpu(GpuState& s) {
  bool hpBusy = false;
  for (auto& [key, slot] : s.hpSlots) hpBusy = hpBusy || s.words.load(slot.word) != slot.issued;
  if (s.activity.observe(now(), hpBusy)) openGate(s);
  for (auto& [key, lane] : s.lanes) {
    for (auto action : lane->book.observe(s.words.load(lane->done), s.words.load(lane->preempted),
                                          s.activity.gateOpen())) {
      if (action.kind == PtbLaneBook::Action::kRetire) {
        lane->runs.pop_front();
        continue;
      }
      PtbRun& run = lane->runs.front();
      s.words.store(lane->preempted, static_cast<uint32_t>(run.seq - 1));
      ++resumes_;
      if (run.preemptions != nullptr) run.preemptions->fetch_add(1, std::memory_order_relaxed);
      if (CUresult r = enqueuePtb(s, *lane, run, lane->resume); r != CUDA_SUCCESS) {
        spdlog::error("scheduler: cannot resume a PTB kernel of tenant {}: CUresult {}; releasing its stream",
                      lane->tenant, static_cast<int>(r));
        s.words.store(lane->done, static_cast<uint32_t>(run.seq));
      }
    }
  }
  for (size_t i = 0; i < s.measuring.size();) {
    Measurement& m = s.measuring[i];
    if (cuEventQuery(m.end) != CUDA_SUCCESS) {
      ++i;
      continue;
    }
    float ms = 0;
    if (cuEventElapsedTime(&ms, m.start, m.end) == CUDA_SUCCESS) profiles_.record(m.key, ms * 1000.0);
    ++measured_;
    s.eventPool.emplace_back(m.start, m.end);
    s.measuring[i] = std::move(s.measuring.back());
    s.measuring.pop_back();
  }
}

void PriorityPolicy::monitor() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // sleep for microseconds, not the default 50
  auto lastSave = std::chrono::steady_clock::now();
  while (!stopping_) {
    {
      std::lock_guard lock(mutex_);
      for (auto& [g, s] : gpus_) {
        g->makeCurrent();
        pollGpu(*s);
      }
    }
    if (std::chrono::steady_clock::now() - lastSave > std::chrono::seconds(30)) {
      saveProfiles();
      lastSave = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(kMonitorPeriod);
  }
}

// ---- tenants ending ----------------------------------------------------------------------------

void PriorityPolicy::tenantEnding(uint64_t tenant) {
  std::lock_guard lock(mutex_);
  for (auto& [g, s] : gpus_) {
    if (auto it = s->gates.find(tenant); it != s->gates.end()) s->words.store(it->second, 1);
    for (auto it = s->lanes.begin(); it != s->lanes.end();) {
      if (it->second->tenant != tenant) {
        ++it;
        continue;
      }
      // Stop its running PTB kernel and let its stream past every wait: the work is abandoned.
      Lane& lane = *it->second;
      s->words.store(lane.retreat, 1);
      s->words.store(lane.done, static_cast<uint32_t>(lane.book.lastSeq()));
      s->endedLanes.push_back(std::move(it->second));
      it = s->lanes.erase(it);
    }
  }
}

void PriorityPolicy::tenantReleased(uint64_t tenant) {
  std::lock_guard lock(mutex_);
  for (auto& [g, s] : gpus_) {
    g->makeCurrent();
    if (auto it = s->gates.find(tenant); it != s->gates.end()) {
      s->words.give(it->second);
      s->gates.erase(it);
    }
    for (auto it = s->hpSlots.begin(); it != s->hpSlots.end();) {
      if (it->first.first != tenant) {
        ++it;
        continue;
      }
      s->words.give(it->second.word);
      it = s->hpSlots.erase(it);
    }
    for (auto it = s->endedLanes.begin(); it != s->endedLanes.end();) {
      Lane& lane = **it;
      if (lane.tenant != tenant) {
        ++it;
        continue;
      }
      if (lane.resume != nullptr) {
        cuStreamSynchronize(lane.resume);
        cuStreamDestroy(lane.resume);
      }
      if (lane.progress != 0) cuMemFree(lane.progress);
      for (int word : {lane.retreat, lane.done, lane.preempted}) s->words.give(word);
      it = s->endedLanes.erase(it);
    }
  }
}

std::string PriorityPolicy::summary() const {
  std::lock_guard lock(mutex_);
  return "priority: " + std::to_string(beOriginal_) + " BE original, " + std::to_string(beSliced_) + " sliced, " +
         std::to_string(bePtb_) + " PTB launches, " + std::to_string(resumes_) + " resumes, " +
         std::to_string(gateCloses_) + " gate closes, " + std::to_string(measured_) + " timed, " +
         std::to_string(profiles_.size()) + " kernel shapes learned";
}

std::unique_ptr<Policy> makePolicy(const SchedulerConfig& config, std::string& error) {
  if (config.policy == "passthrough") return std::make_unique<PassthroughPolicy>();
  if (config.policy == "priority") return std::make_unique<PriorityPolicy>(config);
  error = "unknown scheduler policy \"" + config.policy + "\" (expected \"passthrough\" or \"priority\")";
  return nullptr;
}

}  // namespace tally::server::scheduler
