#include "server/scheduler/priority_policy.h"

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tally::server::scheduler {
namespace {

constexpr size_t kWordsPerGpu = 16384;
constexpr size_t kLanesPerGpu = 4096;  // BE tenants with PTB kernels on one GPU at once
constexpr Nanos kMonitorPeriod = 10'000;
// An HP mark deferred this long is written by the monitor: a tenant thread stuck in a driver call
// (a lazy module load, a context-wide free) must not keep HP looking busy, and the gate shut.
constexpr Nanos kMaxUnmarked = 200'000;
constexpr Nanos kWaitPeriod = 10'000;  // a BE thread's polling while held
constexpr size_t kMaxInFlight = 2;  // BE kernels of one tenant on the GPU at once ...
constexpr Nanos kMaxInFlightWait = 1'000'000;  // ... unless they take longer than this
constexpr unsigned kPtbResumes = 4;  // retreats a PTB launch honours before it runs to the end
constexpr Nanos kSaveProfilesEvery = 30'000'000'000;
constexpr size_t kAloneWindow = 200;  // an HP tenant's waits alone per p99 (as the controller's window)

std::string shapeKey(const KernelLaunch& k) {
  const auto& s = k.shape;
  return *k.profileKey + "/" + std::to_string(s.grid[0]) + "x" + std::to_string(s.grid[1]) + "x" +
         std::to_string(s.grid[2]) + "/" + std::to_string(s.block[0]) + "x" + std::to_string(s.block[1]) + "x" +
         std::to_string(s.block[2]) + "/" + std::to_string(s.sharedMem);
}

// Counts a launch held back for `micros` in the tenant's counters (tallyctl stats).
void countHeld(const KernelLaunch& k, double micros) {
  if (k.held == nullptr || micros < 1) return;
  k.held->record(micros);
}

}  // namespace

// ---- mapped words ------------------------------------------------------------------------------

bool MappedWords::allocate(size_t count, std::string& error) {
  void* host = nullptr;
  if (CUresult r = launcher_.allocMappedHost(count * sizeof(uint32_t), host); r != CUDA_SUCCESS) {
    error = "cuMemHostAlloc of the scheduler's words: CUresult " + std::to_string(r);
    return false;
  }
  host_ = static_cast<uint32_t*>(host);
  if (CUresult r = launcher_.mappedDevicePointer(host, device_); r != CUDA_SUCCESS) {
    error = "cuMemHostGetDevicePointer of the scheduler's words: CUresult " + std::to_string(r);
    return false;
  }
  used_.assign(count, false);
  return true;
}

MappedWords::~MappedWords() {
  if (host_ != nullptr) launcher_.freeHost(host_);
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

void PriorityPolicy::AloneTail::observe(double micros, size_t window) {
  waits.push_back(micros);
  if (waits.size() < window) return;
  p99 = p99Of(waits);
  waits.clear();
}

PriorityPolicy::PriorityPolicy(SchedulerConfig config, const std::vector<gpu::Gpu*>& gpus, Launcher& launcher,
                               Clock& clock, std::string& error, bool monitorThread)
    : config_(std::move(config)), launcher_(launcher), clock_(clock) {
  if (!config_.profilesPath.empty()) {  // first: setUp reads HP's learned p99 alone
    std::string why;
    if (!profiles_.load(config_.profilesPath, why)) spdlog::warn("scheduler: ignoring learned durations: {}", why);
    if (profiles_.size() > 0) spdlog::info("scheduler: {} learned durations from {}", profiles_.size(), config_.profilesPath);
  }
  for (gpu::Gpu* g : gpus) {
    if (!setUp(*g, error)) return;
  }
  if (config_.hpP99Budget.set() && !config_.smPartition) {
    spdlog::warn("scheduler: an HP p99 budget without SM partitions has nothing to choose from; set priority_sm_partition");
  }
  knobs_.budgetMicros = config_.budgetMicros;
  knobs_.useTransforms = config_.transforms;
  // The monitor opens the gate and collects timings: with neither layer on, nothing to poll for.
  if (monitorThread && tracksHpActivity()) monitor_ = std::thread([this] { monitor(); });
}

PriorityPolicy::~PriorityPolicy() {
  stopping_ = true;
  if (monitor_.joinable()) monitor_.join();
  saveProfiles();
  std::lock_guard lock(mutex_);
  for (auto& [g, s] : gpus_) {
    launcher_.makeCurrent(g);
    for (auto& m : s->measuring) {
      launcher_.destroyEvent(m.start);
      launcher_.destroyEvent(m.end);
    }
    for (auto [a, b] : s->eventPool) {
      launcher_.destroyEvent(a);
      launcher_.destroyEvent(b);
    }
    if (s->progressPool != 0) launcher_.freeDevice(s->progressPool);
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
  auto [least, greatest] = launcher_.streamPriorityRange(&g);
  return highPriority ? greatest : least;
}

bool PriorityPolicy::setUp(gpu::Gpu& g, std::string& error) {
  auto s = std::make_unique<GpuState>(launcher_);
  s->gpu = &g;
  s->activity = HpActivity(static_cast<Nanos>(config_.idleWindowMicros * 1000));
  launcher_.makeCurrent(&g);
  const int ordinal = launcher_.ordinal(&g);
  if (!s->words.allocate(kWordsPerGpu, error)) return false;
  if (CUresult r = launcher_.allocDevice(kLanesPerGpu * sizeof(uint64_t), s->progressPool); r != CUDA_SUCCESS) {
    s->progressPool = 0;
    error = "GPU " + std::to_string(ordinal) + ": cannot allocate PTB progress counters: CUresult " + std::to_string(r);
    return false;
  }
  s->progressUsed.assign(kLanesPerGpu, false);
  if (config_.smPartition) {
    if (!launcher_.partitionSms(&g, *config_.smPartition, error)) return false;
    s->split = std::make_unique<PartitionSplit>(static_cast<Nanos>(config_.partitionIdleMillis * 1e6));
    const size_t reserves = config_.smPartition->levels();
    PartitionController::Knobs knobs;
    knobs.levels = reserves + (ladderHasUnchainedRung() ? 1 : 0);
    knobs.budget = config_.hpP99Budget;
    s->controller = PartitionController(knobs);
    if (auto alone = profiles_.micros(aloneKey(g))) s->controller.setAloneP99(*alone);
    if (auto level = profiles_.micros(settledLevelKey(g)); level && *level >= 0) {
      s->controller.rememberLevel(static_cast<size_t>(std::lround(*level)));
    }
    useControllerLevel(*s, knobs.levels);
    for (size_t level = 1; level <= reserves; ++level) {
      spdlog::info("scheduler on GPU {}: SM partition level {}: {} of {} while both classes are active", ordinal,
                   level, reserveName(g, level), launcher_.partitionSmCount(&g, gpu::Placement::wholeGpu()));
    }
    if (controlsPartitions()) {
      const HpP99Budget& b = knobs.budget;
      const std::string servesAsWell = "that serves HP as well as the best stronger one";
      spdlog::info("scheduler on GPU {}: the level is chosen online: the weakest {}", ordinal,
                   b.micros > 0   ? fmt::format("whose HP p99 is within {:.0f} µs, else the weakest {}", b.micros,
                                                servesAsWell)
                   : b.factor > 0 ? fmt::format("whose HP p99 is within {:.2f}x of HP's alone, else the weakest {}",
                                                b.factor, servesAsWell)
                                  : servesAsWell);
    }
  }
  if (config_.transforms && !launcher_.hasPtbHelpers(&g)) {
    spdlog::warn("scheduler on GPU {}: no PTB helpers; best-effort kernels will not be preempted", ordinal);
  }
  gpus_.emplace(&g, std::move(s));
  return true;
}

PriorityPolicy::GpuState* PriorityPolicy::stateFor(gpu::Gpu& g) {
  auto it = gpus_.find(&g);
  return it == gpus_.end() ? nullptr : it->second.get();
}

// gpus_ is filled by the constructor only, so reading it needs no lock: the HP thread asks here
// before every call that queues work.
gpu::Placement PriorityPolicy::placement(bool highPriority, gpu::Gpu& g) {
  GpuState* s = stateFor(g);
  if (s == nullptr || !s->split || !s->split->noteWork(highPriority, clock_.now())) return gpu::Placement::wholeGpu();
  const uint8_t level = s->level.load(std::memory_order_relaxed);
  if (level == 0) return gpu::Placement::wholeGpu();
  return highPriority ? gpu::Placement::hp(level - 1) : gpu::Placement::be(level - 1);
}

bool PriorityPolicy::beWorkIsolated(gpu::Gpu& g) {
  GpuState* s = stateFor(g);
  return s != nullptr && s->split && !config_.partitionGate && s->level.load(std::memory_order_relaxed) > 0 &&
         s->split->split(clock_.now());
}

void PriorityPolicy::observeHpWait(gpu::Gpu& g, uint64_t tenant, double micros) {
  GpuState* s = stateFor(g);
  if (s == nullptr || !s->split || !controlsPartitions()) return;
  std::lock_guard lock(mutex_);
  AloneTail& own = s->hpAlone[tenant];
  if (!s->split->split(clock_.now())) {  // HP alone: what a relative budget is relative to
    const double known = s->controller.aloneP99();
    s->controller.observeHpAloneWait(micros);
    if (s->controller.aloneP99() != known) profiles_.record(aloneKey(g), s->controller.aloneP99());
    own.observe(micros, kAloneWindow);
    return;
  }
  const size_t before = s->controller.level();
  const std::optional<size_t> settled = s->controller.settledLevel();
  s->controller.observeHpWait(micros, own.p99);
  const size_t after = s->controller.level();
  useControllerLevel(*s, after);
  if (auto now = s->controller.settledLevel(); now && now != settled) profiles_.set(settledLevelKey(g), double(*now));
  if (before != after) {
    spdlog::info("scheduler on GPU {}: HP p99 {:.0f} µs at {}; now {}", launcher_.ordinal(&g),
                 s->controller.p99At(before), controllerLevelName(g, before), controllerLevelName(g, after));
  }
}

void PriorityPolicy::useControllerLevel(GpuState& s, size_t level) {
  const bool rung = ladderHasUnchainedRung();
  s.hpUnchained.store(rung && level == 0, std::memory_order_relaxed);
  s.level.store(static_cast<uint8_t>(rung && level > 0 ? level - 1 : level), std::memory_order_relaxed);
}

std::string PriorityPolicy::controllerLevelName(gpu::Gpu& g, size_t level) {
  if (!ladderHasUnchainedRung()) return reserveName(g, level);
  return level == 0 ? "every SM shared, HP unchained" : reserveName(g, level - 1);
}

unsigned PriorityPolicy::smsKeptFromBestEffort(gpu::Gpu& g) {
  GpuState* s = stateFor(g);
  if (s == nullptr || !s->split || !s->split->split(clock_.now())) return 0;
  const uint8_t level = s->level.load(std::memory_order_relaxed);
  if (level == 0) return 0;
  return launcher_.partitionSmCount(&g, gpu::Placement::wholeGpu()) -
         launcher_.partitionSmCount(&g, gpu::Placement::be(level - 1));
}

// HP's p99 wait with no BE work active on `g`, kept with the learned kernel durations.
std::string PriorityPolicy::aloneKey(gpu::Gpu& g) {
  return "gpu" + std::to_string(launcher_.ordinal(&g)) + "/hp-alone-wait-p99";
}

// Per GPU, reserve ladder and budget: a level means nothing under another ladder, and the level
// that meets one budget is not the one that meets another.
std::string PriorityPolicy::settledLevelKey(gpu::Gpu& g) {
  std::string key = "gpu" + std::to_string(launcher_.ordinal(&g)) + "/settled-level/";
  for (const gpu::SmReserve& r : config_.smPartition->reserves) {
    key += std::to_string(r.size) + (config_.smPartition->percent ? "%" : "") + (r.overlap ? "o" : "") + ",";
  }
  const HpP99Budget& b = config_.hpP99Budget;
  key += b.micros > 0 ? fmt::format("{:g}us", b.micros) : b.factor > 0 ? fmt::format("{:g}x", b.factor) : "as-well";
  return key + (ladderHasUnchainedRung() ? "/unchained-rung" : "");
}

std::string PriorityPolicy::reserveName(gpu::Gpu& g, size_t level) {
  if (level == 0) return "every SM shared";
  const auto hp = gpu::Placement::hp(static_cast<uint8_t>(level - 1));
  const auto be = gpu::Placement::be(static_cast<uint8_t>(level - 1));
  return "HP " + std::to_string(launcher_.partitionSmCount(&g, hp)) + " SMs / BE " +
         std::to_string(launcher_.partitionSmCount(&g, be));
}

void PriorityPolicy::closeGate(GpuState& s) {
  ++gateCloses_;
  s.gateOpen = false;
  for (auto& [tenant, lane] : s.lanes) s.words.store(lane->retreat, 1);
}

void PriorityPolicy::openGate(GpuState& s) {
  for (auto& [tenant, lane] : s.lanes) s.words.store(lane->retreat, 0);
  s.gateOpen = true;
}

// ---- high priority -----------------------------------------------------------------------------

void PriorityPolicy::markHpWork(GpuState& s, StreamKey key, CUstream stream) {
  std::vector<PendingMark> now;
  {
    std::lock_guard lock(mutex_);
    if (s.activity.submitted(clock_.now())) closeGate(s);
    auto [it, inserted] = s.hpSlots.try_emplace(key);
    if (inserted) it->second.word = s.words.take(0);
    auto& slot = it->second;
    if (slot.word < 0) return;
    // Counted at once, so the word lags behind until a mark after this work has run: HP is busy
    // from submission on, however late the mark is written.
    ++slot.issued;
    // The tenant's stream moved to another driver stream (an SM partition): the old one gets its
    // mark now, after its last work.
    if (slot.unmarked != nullptr && slot.unmarked != stream) {
      now.push_back({slot.unmarked, s.words.device(slot.word), slot.issued - 1});
    }
    if (slot.unmarked == nullptr) {
      unmarkedSlots_.fetch_add(1, std::memory_order_relaxed);
      slot.unmarkedSince = clock_.now();
    }
    slot.unmarked = stream;
  }
  writeMarks(now);
}

void PriorityPolicy::writeMarks(const std::vector<PendingMark>& marks) {
  for (const PendingMark& m : marks) launcher_.writeValue32(m.stream, m.word, m.value);
}

void PriorityPolicy::endOfBurst(uint64_t tenant) {
  if (unmarkedSlots_.load(std::memory_order_relaxed) == 0) return;
  std::vector<PendingMark> marks;
  {
    std::lock_guard lock(mutex_);
    for (auto& [g, s] : gpus_) {
      for (auto it = s->hpSlots.lower_bound({tenant, 0}); it != s->hpSlots.end() && it->first.first == tenant; ++it) {
        auto& slot = it->second;
        if (slot.unmarked == nullptr) continue;
        marks.push_back({slot.unmarked, s->words.device(slot.word), slot.issued});
        slot.unmarked = nullptr;
        unmarkedSlots_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
  writeMarks(marks);
}

std::optional<SchedulerConfig::HpChain> parseHpChain(std::string_view text) {
  using HpChain = SchedulerConfig::HpChain;
  for (HpChain c : {HpChain::kOff, HpChain::kWhileBestEffort, HpChain::kAlways}) {
    if (text == hpChainName(c)) return c;
  }
  return std::nullopt;
}

const char* hpChainName(SchedulerConfig::HpChain chain) {
  switch (chain) {
    case SchedulerConfig::HpChain::kOff: return "off";
    case SchedulerConfig::HpChain::kWhileBestEffort: return "auto";
    case SchedulerConfig::HpChain::kAlways: return "always";
  }
  return "?";
}

// How long after BE work was last queued on a GPU HP kernels there still run chained: longer
// than a training step's gaps between launches, short next to a BE job's pauses.
constexpr Nanos kChainWindow = 200'000'000;

// A kernel that follows a copy runs chained too, without overlapping it: its early signal is
// what lets the request's second kernel be queued while the first one's blocks still wait for
// SMs that BE blocks hold (measured on the H200: docs/benchmarks.md, "The first kernel of a
// request chained too").
bool PriorityPolicy::chains(const KernelLaunch& k) {
  if (k.chained == nullptr) return false;
  switch (config_.hpChain) {
    case SchedulerConfig::HpChain::kOff: return false;
    case SchedulerConfig::HpChain::kAlways: return true;
    case SchedulerConfig::HpChain::kWhileBestEffort: break;
  }
  const GpuState* s = stateFor(*k.gpu);
  return s != nullptr && !s->hpUnchained.load(std::memory_order_relaxed) &&
         clock_.now() - s->beQueuedAt.load(std::memory_order_relaxed) < kChainWindow;
}

CUresult PriorityPolicy::launchHpKernel(const KernelLaunch& k, void** params) {
  if (!chains(k)) return launcher_.launchOriginal(k, params);
  hpChained_.fetch_add(1, std::memory_order_relaxed);
  if (k.chainedLaunches != nullptr) k.chainedLaunches->fetch_add(1, std::memory_order_relaxed);
  return launcher_.launchChained(k, params);
}

void PriorityPolicy::noteBestEffortWork(gpu::Gpu& g) {
  if (GpuState* s = stateFor(g)) s->beQueuedAt.store(clock_.now(), std::memory_order_relaxed);
}

CUresult PriorityPolicy::launchHighPriority(const KernelLaunch& k) {
  if (!tracksHpActivity()) {  // nothing waits for HP to go idle: no lock, no mark on HP's path
    ParameterPointers params(k);
    return launchHpKernel(k, params.get());
  }
  GpuState* s = nullptr;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(*k.gpu);
    if (s != nullptr && s->activity.submitted(clock_.now())) closeGate(*s);
  }
  ParameterPointers params(k);
  CUresult r = launchHpKernel(k, params.get());
  if (r == CUDA_SUCCESS && s != nullptr) markHpWork(*s, {k.tenant, k.streamId}, k.stream);
  return r;
}

void PriorityPolicy::afterWork(uint64_t tenant, bool highPriority, uint64_t streamId, gpu::Gpu& g, CUstream stream) {
  if (!highPriority || !tracksHpActivity()) return;
  GpuState* s = nullptr;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(g);
  }
  if (s != nullptr) markHpWork(*s, {tenant, streamId}, stream);
}

// ---- best effort -------------------------------------------------------------------------------

PriorityPolicy::Lane* PriorityPolicy::laneFor(GpuState& s, const KernelLaunch& k) {
  auto& slot = s.lanes[k.tenant];
  if (slot) return slot.get();
  auto lane = std::make_unique<Lane>();
  lane->tenant = k.tenant;
  for (size_t i = 0; i < s.progressUsed.size() && lane->progressSlot < 0; ++i) {
    if (s.progressUsed[i]) continue;
    s.progressUsed[i] = true;
    lane->progressSlot = static_cast<int>(i);
    lane->progress = s.progressPool + i * sizeof(uint64_t);
  }
  bool ok = lane->progressSlot >= 0;
  lane->retreat = s.words.take(s.gateOpen ? 0 : 1);
  lane->never = s.words.take(0);
  if (!ok || lane->retreat < 0 || lane->never < 0) {
    s.endedLanes.push_back(std::move(lane));  // freed with the tenant
    s.lanes.erase(k.tenant);
    return nullptr;
  }
  slot = std::move(lane);
  return slot.get();
}

void PriorityPolicy::waitTurn(GpuState& s, Lane& lane, const KernelLaunch& k, bool gated) {
  const Nanos started = clock_.now();
  // This thread polls at microsecond steps: without this its sleeps last 50 µs or more.
  thread_local bool slackSet = (prctl(PR_SET_TIMERSLACK, 1000UL), true);
  (void)slackSet;
  gated = gated && !k.mustNotHold;
  while (gated && config_.gate && !s.gateOpen.load(std::memory_order_acquire) && !stopping_) {
    clock_.sleepFor(kWaitPeriod);
  }
  // Bounded: a kernel may wait for something this tenant has not asked for yet (a flag a later
  // kernel sets, a host callback), which this thread must stay free to deliver.
  const Nanos deadline = clock_.now() + kMaxInFlightWait;
  const size_t limit = config_.gate ? kMaxInFlight : SIZE_MAX;  // the ablation without a gate holds nothing
  while (lane.inFlight.size() >= limit && !stopping_ && clock_.now() < deadline) {
    CUresult r = launcher_.queryEvent(lane.inFlight.front());
    if (r == CUDA_ERROR_NOT_READY) {
      clock_.sleepFor(kWaitPeriod);
      continue;
    }
    lane.spareEvents.push_back(lane.inFlight.front());
    lane.inFlight.pop_front();
  }
  while (lane.inFlight.size() >= limit) {  // gave up waiting: forget the oldest
    lane.spareEvents.push_back(lane.inFlight.front());
    lane.inFlight.pop_front();
  }
  countHeld(k, double(clock_.now() - started) / 1000.0);
}

void PriorityPolicy::markInFlight(Lane& lane, CUstream stream) {
  if (!config_.gate) return;
  CUevent event = nullptr;
  if (!lane.spareEvents.empty()) {
    event = lane.spareEvents.back();
    lane.spareEvents.pop_back();
  } else if (launcher_.createEvent(event, false) != CUDA_SUCCESS) {
    return;
  }
  if (launcher_.recordEvent(event, stream) == CUDA_SUCCESS) {
    lane.inFlight.push_back(event);
  } else {
    lane.spareEvents.push_back(event);
  }
}

// What occupancy says of this launch shape, asked once per shape (and per set of variants the
// tenant's module has) rather than on every launch. The driver is asked without the policy's
// lock: the first query of a kernel loads it (lazy loading), which can wait until every kernel
// running in the context ends, and HP launches take that lock.
KernelFacts PriorityPolicy::occupancyFacts(const KernelLaunch& k, const std::string& key) {
  std::string cacheKey = key + (k.sliced != nullptr ? "/s" : "/-") + (k.ptb != nullptr ? "p" : "-");
  {
    std::lock_guard lock(mutex_);
    if (auto it = shapes_.find(cacheKey); it != shapes_.end()) return it->second;
  }
  KernelFacts f;
  f.blocks = k.shape.blocks();
  f.hasSliced = launcher_.waveBlocks(k.gpu, k.sliced, k.shape) > 0;
  f.originalWaveBlocks = launcher_.waveBlocks(k.gpu, k.original, k.shape);
  f.waveBlocks = launcher_.waveBlocks(k.gpu, k.ptb, k.shape);
  f.hasPtb = f.waveBlocks > 0 && launcher_.hasPtbHelpers(k.gpu);
  std::lock_guard lock(mutex_);
  return shapes_.try_emplace(cacheKey, f).first->second;
}

// The profile keys of a shape's variants: their timings sit beside the original's.
std::string variantKey(const std::string& shape, VariantKind kind) {
  return shape + (kind == VariantKind::kPtb ? "#ptb" : "#sliced");
}

VariantRecord PriorityPolicy::variantRecord(const std::string& key, VariantKind kind) const {
  const std::string v = variantKey(key, kind);
  return VariantRecord{profiles_.micros(v), profiles_.samples(v)};
}

PriorityPolicy::Measurement PriorityPolicy::startTiming(GpuState& s, CUstream stream) {
  Measurement m;
  {
    std::lock_guard lock(mutex_);
    if (!s.eventPool.empty()) {
      std::tie(m.start, m.end) = s.eventPool.back();
      s.eventPool.pop_back();
    }
  }
  if (m.start == nullptr &&
      (launcher_.createEvent(m.start, true) != CUDA_SUCCESS || launcher_.createEvent(m.end, true) != CUDA_SUCCESS)) {
    if (m.start != nullptr) launcher_.destroyEvent(m.start);
    return Measurement{};
  }
  launcher_.recordEvent(m.start, stream);
  return m;
}

void PriorityPolicy::finishTiming(GpuState& s, Measurement m, CUstream stream, std::string key) {
  if (m.start == nullptr) return;
  launcher_.recordEvent(m.end, stream);
  m.key = std::move(key);
  std::lock_guard lock(mutex_);
  s.measuring.push_back(std::move(m));
}

CUresult PriorityPolicy::launchBestEffort(const KernelLaunch& k) {
  noteBestEffortWork(*k.gpu);
  ParameterPointers params(k);
  if (beWorkIsolated(*k.gpu)) {
    beIsolated_.fetch_add(1, std::memory_order_relaxed);
    return launcher_.launchOriginal(k, params.get());
  }
  // Neither held nor transformed (the defaults): nothing to learn or decide, and no occupancy
  // query that could load the kernel behind every running one.
  if (!config_.gate && !config_.transforms) return launcher_.launchOriginal(k, params.get());
  gpu::KernelParams kernelParams = params.kernelParams();
  std::string key = shapeKey(k);
  KernelFacts facts = occupancyFacts(k, key);
  GpuState* s = nullptr;
  Lane* lane = nullptr;
  LaunchChoice choice;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(*k.gpu);
    if (s != nullptr) lane = laneFor(*s, k);
    if (lane != nullptr) {
      facts.originalMicros = profiles_.micros(key);
      facts.originalTimed = profiles_.samples(key);
      facts.launchesSeen = launchesOfShape_[key]++;
      if (config_.transforms) {  // only then can a variant be chosen
        if (facts.hasSliced) facts.sliced = variantRecord(key, VariantKind::kSliced);
        if (facts.hasPtb) facts.ptb = variantRecord(key, VariantKind::kPtb);
      }
      choice = chooseLaunch(facts, knobs_);
      ++(choice.kind == VariantKind::kOriginal ? beOriginal_ : choice.kind == VariantKind::kSliced ? beSliced_ : bePtb_);
    }
  }
  if (lane == nullptr) return launcher_.launchOriginal(k, params.get());
  // Timed from the first block's start to the last one's end, holds and pauses for HP included:
  // what the variant costs BE, which is what decides whether it pays (chooseLaunch).
  Measurement m;
  switch (choice.kind) {
    case VariantKind::kSliced: {
      if (k.slicedLaunches != nullptr) k.slicedLaunches->fetch_add(1, std::memory_order_relaxed);
      const uint64_t total = k.shape.blocks(), per = gpu::sliceSize(total, choice.slices);
      for (uint64_t offset = 0; offset < total; offset += per) {
        waitTurn(*s, *lane, k, true);  // HP work may come between slices
        if (offset == 0 && choice.measure) m = startTiming(*s, k.stream);
        auto count = static_cast<uint32_t>(std::min(per, total - offset));
        if (CUresult r = launcher_.launchSliceRange(k.sliced, k.shape, k.stream, kernelParams, offset, count);
            r != CUDA_SUCCESS) {
          finishTiming(*s, std::move(m), k.stream, variantKey(key, choice.kind));
          return r;
        }
        markInFlight(*lane, k.stream);
      }
      finishTiming(*s, std::move(m), k.stream, variantKey(key, choice.kind));
      return CUDA_SUCCESS;
    }
    case VariantKind::kPtb: {
      if (k.ptbLaunches != nullptr) k.ptbLaunches->fetch_add(1, std::memory_order_relaxed);
      waitTurn(*s, *lane, k, true);
      if (choice.measure) m = startTiming(*s, k.stream);
      gpu::PtbControl control{lane->progress, s->words.device(lane->retreat)};
      CUresult r = launcher_.launchPtbResumable(k.gpu, k.ptb, k.shape, k.stream, kernelParams,
                                                {choice.workers, choice.chunk}, control,
                                                s->words.device(lane->never), kPtbResumes,
                                                static_cast<uint64_t>(config_.maxPauseMicros * 1000));
      markInFlight(*lane, k.stream);
      finishTiming(*s, std::move(m), k.stream, variantKey(key, choice.kind));
      return r;
    }
    case VariantKind::kOriginal:
      break;
  }
  waitTurn(*s, *lane, k, !choice.besideHp);
  if (choice.measure) m = startTiming(*s, k.stream);
  CUresult r = launcher_.launchOriginal(k, params.get());
  markInFlight(*lane, k.stream);
  finishTiming(*s, std::move(m), k.stream, std::move(key));
  return r;
}

CUresult PriorityPolicy::launch(const KernelLaunch& k) {
  return k.highPriority ? launchHighPriority(k) : launchBestEffort(k);
}

// A graph is one unit to the scheduler: an HP graph closes the gate before it is queued (its
// afterWork mark keeps HP busy until it is done); a BE graph waits its turn like one original
// kernel and counts as one in flight. Its kernels are not variants, so a long BE graph is not
// preempted: the stream priorities are what keep HP ahead of it.
CUresult PriorityPolicy::runOpaque(const OpaqueWork& w) {
  CUstream used = nullptr;
  if (w.highPriority && !tracksHpActivity()) return w.enqueue(used);
  if (!w.highPriority) noteBestEffortWork(*w.gpu);
  KernelLaunch k{};  // what the lane and the wait read of a launch
  k.tenant = w.tenant;
  k.mustNotHold = w.mustNotHold;
  k.held = w.held;
  GpuState* s = nullptr;
  Lane* lane = nullptr;
  {
    std::lock_guard lock(mutex_);
    s = stateFor(*w.gpu);
    if (s != nullptr && w.highPriority && s->activity.submitted(clock_.now())) closeGate(*s);
    if (s != nullptr && !w.highPriority) lane = laneFor(*s, k);
  }
  if (lane == nullptr) return w.enqueue(used);
  if (beWorkIsolated(*w.gpu)) {
    beIsolated_.fetch_add(1, std::memory_order_relaxed);
    return w.enqueue(used);
  }
  waitTurn(*s, *lane, k, true);
  CUresult r = w.enqueue(used);
  if (used != nullptr) markInFlight(*lane, used);
  return r;
}

// ---- the monitor -------------------------------------------------------------------------------

void PriorityPolicy::markStaleSlots(GpuState& s) {
  if (unmarkedSlots_.load(std::memory_order_relaxed) == 0) return;
  const Nanos now = clock_.now();
  for (auto& [key, slot] : s.hpSlots) {
    if (slot.unmarked == nullptr || now - slot.unmarkedSince < kMaxUnmarked) continue;
    // Under the lock, unlike the tenant's own endOfBurst: a later mark of the tenant must not
    // land before this older one.
    launcher_.writeValue32(slot.unmarked, s.words.device(slot.word), slot.issued);
    slot.unmarked = nullptr;
    unmarkedSlots_.fetch_sub(1, std::memory_order_relaxed);
  }
}

void PriorityPolicy::observeHp(GpuState& s) {
  markStaleSlots(s);
  bool hpBusy = false;
  for (auto& [key, slot] : s.hpSlots) hpBusy = hpBusy || s.words.load(slot.word) != slot.issued;
  if (s.activity.observe(clock_.now(), hpBusy)) openGate(s);
}

void PriorityPolicy::collectTimings(GpuState& s) {
  std::vector<Measurement> taken;
  {
    std::lock_guard lock(mutex_);
    taken.swap(s.measuring);
  }
  // The driver is asked without the policy's lock: HP launches take it, and an event query can
  // wait behind another thread's driver call.
  std::vector<std::pair<Measurement, float>> done;
  std::vector<Measurement> pending;
  for (Measurement& m : taken) {
    float ms = -1;
    if (launcher_.queryEvent(m.end) != CUDA_SUCCESS) {
      pending.push_back(std::move(m));
      continue;
    }
    if (launcher_.elapsedMillis(ms, m.start, m.end) != CUDA_SUCCESS) ms = -1;
    done.emplace_back(std::move(m), ms);
  }
  std::lock_guard lock(mutex_);
  for (Measurement& m : pending) s.measuring.push_back(std::move(m));
  for (auto& [m, ms] : done) {
    if (ms >= 0) recordTiming(m.key, ms * 1000.0);
    ++measured_;
    s.eventPool.emplace_back(m.start, m.end);
  }
}

void PriorityPolicy::recordTiming(const std::string& key, double micros) {
  const size_t mark = key.rfind('#');
  if (mark == std::string::npos) {  // an original
    profiles_.record(key, micros);
    return;
  }
  const std::string shape = key.substr(0, mark);
  const auto original = profiles_.micros(shape);
  const VariantRecord before{profiles_.micros(key), profiles_.samples(key)};
  profiles_.record(key, micros);
  const VariantRecord after{profiles_.micros(key), profiles_.samples(key)};
  if (!original || variantPays(after, *original, knobs_) == variantPays(before, *original, knobs_)) return;
  const bool pays = variantPays(after, *original, knobs_);
  if (!pays) ++variantsRefused_;
  spdlog::info("scheduler: {} as {} takes {:.0f} µs against {:.0f} µs as the original ({:.1f}x): {}", shape,
               key.substr(mark + 1), *after.micros, *original, *after.micros / *original,
               pays ? "it runs as the variant again" : "it runs as the original");
}

void PriorityPolicy::pollOnce() {
  // gpus_ is fixed once constructed; each GPU's state is looked at under the lock.
  for (auto& [g, s] : gpus_) {
    launcher_.makeCurrent(g);
    {
      std::lock_guard lock(mutex_);
      observeHp(*s);
    }
    collectTimings(*s);
  }
}

void PriorityPolicy::monitor() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // sleep for microseconds, not the default 50
  Nanos lastSave = clock_.now();
  while (!stopping_) {
    pollOnce();
    if (clock_.now() - lastSave > kSaveProfilesEvery) {
      saveProfiles();
      lastSave = clock_.now();
    }
    clock_.sleepFor(kMonitorPeriod);
  }
}

// ---- tenants ending ----------------------------------------------------------------------------

void PriorityPolicy::tenantEnding(uint64_t tenant) {
  endOfBurst(tenant);  // its streams still exist; they are destroyed after this
  // The tenant's thread is out of launch() by now, so nothing of it waits on the policy; its
  // lane goes aside until its streams are drained.
  std::lock_guard lock(mutex_);
  for (auto& [g, s] : gpus_) {
    auto it = s->lanes.find(tenant);
    if (it == s->lanes.end()) continue;
    s->endedLanes.push_back(std::move(it->second));
    s->lanes.erase(it);
  }
}

void PriorityPolicy::tenantReleased(uint64_t tenant) {
  // The events are destroyed after the policy's lock is let go: a driver call may wait behind a
  // context-wide one (module load, free) for long, and the monitor must keep running meanwhile.
  std::vector<std::pair<gpu::Gpu*, CUevent>> events;
  {
    std::lock_guard lock(mutex_);
    forgetTenant(tenant, events);
  }
  for (auto [g, e] : events) {
    launcher_.makeCurrent(g);
    launcher_.destroyEvent(e);
  }
}

void PriorityPolicy::forgetTenant(uint64_t tenant, std::vector<std::pair<gpu::Gpu*, CUevent>>& events) {
  for (auto& [g, s] : gpus_) {
    s->hpAlone.erase(tenant);
    for (auto it = s->hpSlots.begin(); it != s->hpSlots.end();) {
      if (it->first.first != tenant) {
        ++it;
        continue;
      }
      s->words.give(it->second.word);
      if (it->second.unmarked != nullptr) unmarkedSlots_.fetch_sub(1, std::memory_order_relaxed);
      it = s->hpSlots.erase(it);
    }
    for (auto it = s->endedLanes.begin(); it != s->endedLanes.end();) {
      Lane& lane = **it;
      if (lane.tenant != tenant) {
        ++it;
        continue;
      }
      for (CUevent e : lane.inFlight) events.emplace_back(g, e);
      for (CUevent e : lane.spareEvents) events.emplace_back(g, e);
      if (lane.progressSlot >= 0) s->progressUsed[static_cast<size_t>(lane.progressSlot)] = false;
      for (int word : {lane.retreat, lane.never}) s->words.give(word);
      it = s->endedLanes.erase(it);
    }
  }
}

std::string PriorityPolicy::summary() const {
  std::lock_guard lock(mutex_);
  return "priority: " + std::to_string(beOriginal_) + " BE original, " + std::to_string(beSliced_) + " sliced, " +
         std::to_string(bePtb_) + " PTB launches, " + std::to_string(beIsolated_.load()) + " in the BE partition, " +
         std::to_string(gateCloses_) + " gate closes, " + std::to_string(measured_) + " timed, " +
         std::to_string(variantsRefused_) + " variants that did not pay, " + std::to_string(profiles_.size()) +
         " durations learned, " + std::to_string(hpChained_.load()) + " HP launches chained";
}

}  // namespace tally::server::scheduler
