// A simulated GPU and clock behind the scheduler's Launcher and Clock (server/scheduler/launcher.h),
// so that the policies run unchanged in CPU tests, single-threaded and deterministic. Time moves
// only when the test (or a policy's sleepFor) advances it. Each stream runs its work in order:
// a kernel starts when the stream's previous work is done and takes its configured duration;
// streams run beside each other without contention. Events complete, and stream writes reach
// their (host) word, once the stream's work queued before them is done. Every launch is recorded.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "server/gpu/gpu.h"
#include "server/scheduler/launcher.h"
#include "server/scheduler/policy.h"

namespace tally::server::scheduler::sim {

constexpr Nanos kMicros = 1000;

enum class LaunchKind { kOriginal, kChained, kSliceRange, kSliced, kPtb, kPtbPreempted, kPtbResumable };

struct FakeLaunch {
  LaunchKind kind = LaunchKind::kOriginal;
  uint64_t tenant = 0;  // the stream's owner (newStream)
  CUstream stream = nullptr;
  CUfunction function = nullptr;
  uint64_t blocks = 0;  // the original grid's blocks (a slice range: its own)
  size_t attributes = 0;
  bool overlapsPrevious = false;    // kChained with programmatic stream serialization
  uint64_t slices = 0;              // kSliced
  gpu::PtbWorkers workers;          // PTB kinds
  gpu::PtbControl control;          // PTB kinds
  CUdeviceptr neverRetreat = 0;     // kPtbResumable
  size_t preemptions = 0;           // kPtbPreempted
  Nanos queued = 0, start = 0, end = 0;
};

struct FakeGpuSpec {
  int ordinal = 0;
  unsigned sms = 132;
  int streamPriorityLeast = 0, streamPriorityGreatest = -5;
  bool ptbHelpers = true;
  unsigned hpSms = 40;  // what partitionSms gives HP at the first level
};

class FakeLauncher final : public Launcher, public Clock {
 public:
  // Run after every sleepFor: the test's stand-in for the policy's monitor thread.
  std::function<void()> onSleep;
  // Run inside every occupancy query: where the driver may load a kernel and wait.
  std::function<void()> onOccupancyQuery;
  std::vector<FakeLaunch> launches;
  std::vector<std::pair<CUstream, CUdeviceptr>> writes;  // writeValue32's, in order

  // A GPU key for the policy; it points at storage the size of a gpu::Gpu that nothing reads.
  gpu::Gpu* addGpu(FakeGpuSpec spec = {}) {
    gpus_.push_back({std::make_unique<Storage>(), spec});
    return reinterpret_cast<gpu::Gpu*>(gpus_.back().storage.get());
  }
  CUstream newStream(uint64_t tenant) {
    auto s = reinterpret_cast<CUstream>(uintptr_t(0x5000 + 16 * (owners_.size() + 1)));
    owners_[s] = tenant;
    return s;
  }
  // How long a whole launch of `f` runs (a slice: its share of the blocks), and how many blocks
  // of it an SM holds.
  void setKernel(CUfunction f, Nanos duration, int blocksPerSm = 2) {
    durations_[f] = duration;
    blocksPerSm_[f] = blocksPerSm;
  }

  // ---- Clock
  Nanos now() override { return now_; }
  void sleepFor(Nanos duration) override {
    advance(duration);
    if (onSleep) onSleep();
  }
  void advance(Nanos duration) {
    now_ += duration;
    for (auto it = writes_.begin(); it != writes_.end();) {
      if (it->at > now_) {
        ++it;
        continue;
      }
      *reinterpret_cast<uint32_t*>(it->address) = it->value;
      it = writes_.erase(it);
    }
  }
  // When the stream's queued work is done.
  Nanos streamDone(CUstream s) const {
    auto it = tails_.find(s);
    return it == tails_.end() ? 0 : it->second;
  }

  // ---- Launcher: the GPU
  void makeCurrent(gpu::Gpu*) override {}
  int ordinal(const gpu::Gpu* g) override { return spec(g).ordinal; }
  std::pair<int, int> streamPriorityRange(const gpu::Gpu* g) override {
    return {spec(g).streamPriorityLeast, spec(g).streamPriorityGreatest};
  }
  bool hasPtbHelpers(const gpu::Gpu* g) override { return spec(g).ptbHelpers; }
  uint64_t waveBlocks(const gpu::Gpu* g, CUfunction f, const gpu::LaunchShape&) override {
    if (onOccupancyQuery) onOccupancyQuery();
    auto it = blocksPerSm_.find(f);
    return f == nullptr || it == blocksPerSm_.end() ? 0 : uint64_t(std::max(it->second, 0)) * spec(g).sms;
  }
  bool partitionSms(gpu::Gpu*, gpu::SmPartitionSpec, std::string&) override { return true; }
  unsigned partitionSmCount(const gpu::Gpu* g, gpu::Placement p) override {
    const FakeGpuSpec& s = spec(g);
    const unsigned hpSms = s.hpSms * (p.level + 1u);  // level i reserves (i + 1) x hpSms
    switch (p.side) {
      case gpu::Placement::Side::kHp: return hpSms;
      case gpu::Placement::Side::kBe: return s.sms - hpSms;
      case gpu::Placement::Side::kWholeGpu: break;
    }
    return s.sms;
  }

  // ---- memory: host memory, its address standing in for the device's
  CUresult allocMappedHost(size_t bytes, void*& host) override {
    memory_.push_back(std::make_unique<uint64_t[]>((bytes + 7) / 8));
    host = memory_.back().get();
    return CUDA_SUCCESS;
  }
  CUresult mappedDevicePointer(void* host, CUdeviceptr& device) override {
    device = reinterpret_cast<CUdeviceptr>(host);
    return CUDA_SUCCESS;
  }
  void freeHost(void* host) override { release(host); }
  CUresult allocDevice(size_t bytes, CUdeviceptr& device) override {
    void* host = nullptr;
    allocMappedHost(bytes, host);
    device = reinterpret_cast<CUdeviceptr>(host);
    return CUDA_SUCCESS;
  }
  void freeDevice(CUdeviceptr device) override { release(reinterpret_cast<void*>(device)); }
  size_t allocations() const { return memory_.size(); }

  // ---- stream work
  CUresult launchOriginal(const KernelLaunch& k, void**) override {
    FakeLaunch l = queue(LaunchKind::kOriginal, k.stream, k.original, k.shape.blocks(), duration(k.original));
    l.attributes = k.attributes.size();
    return record(l);
  }
  CUresult launchChained(const KernelLaunch& k, void**) override {
    FakeLaunch l = queue(LaunchKind::kChained, k.stream, k.chained, k.shape.blocks(), duration(k.chained));
    l.overlapsPrevious = k.followsKernel;
    return record(l);
  }
  CUresult launchSliceRange(CUfunction sliced, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams,
                            uint64_t, uint32_t count) override {
    Nanos d = duration(sliced) * Nanos(count) / Nanos(std::max<uint64_t>(shape.blocks(), 1));
    return record(queue(LaunchKind::kSliceRange, stream, sliced, count, d));
  }
  CUresult launchSliced(CUfunction sliced, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams,
                        uint64_t slices) override {
    FakeLaunch l = queue(LaunchKind::kSliced, stream, sliced, shape.blocks(), duration(sliced));
    l.slices = slices;
    return record(l);
  }
  CUresult resetPtb(gpu::PtbControl, CUstream) override { return CUDA_SUCCESS; }
  CUresult launchPtb(CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream, gpu::KernelParams,
                     gpu::PtbWorkers workers, gpu::PtbControl control) override {
    FakeLaunch l = queue(LaunchKind::kPtb, stream, ptb, shape.blocks(), duration(ptb));
    l.workers = workers;
    l.control = control;
    return record(l);
  }
  CUresult launchPtbPreempted(gpu::Gpu* g, CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream, CUstream,
                              gpu::KernelParams, gpu::PtbWorkers workers, gpu::PtbControl control,
                              std::span<const uint64_t> thresholds) override {
    if (!spec(g).ptbHelpers) return CUDA_ERROR_NOT_INITIALIZED;
    FakeLaunch l = queue(LaunchKind::kPtbPreempted, stream, ptb, shape.blocks(), duration(ptb));
    l.workers = workers;
    l.control = control;
    l.preemptions = thresholds.size();
    return record(l);
  }
  CUresult launchPtbResumable(gpu::Gpu* g, CUfunction ptb, const gpu::LaunchShape& shape, CUstream stream,
                              gpu::KernelParams, gpu::PtbWorkers workers, gpu::PtbControl control,
                              CUdeviceptr neverRetreat, unsigned, uint64_t) override {
    if (!spec(g).ptbHelpers) return CUDA_ERROR_NOT_INITIALIZED;
    FakeLaunch l = queue(LaunchKind::kPtbResumable, stream, ptb, shape.blocks(), duration(ptb));
    l.workers = workers;
    l.control = control;
    l.neverRetreat = neverRetreat;
    return record(l);
  }
  CUresult writeValue32(CUstream stream, CUdeviceptr address, uint32_t value) override {
    writes.emplace_back(stream, address);
    writes_.push_back({streamDone(stream) > now_ ? streamDone(stream) : now_, address, value});
    advance(0);  // due at once on an idle stream
    return CUDA_SUCCESS;
  }

  // ---- events
  CUresult createEvent(CUevent& event, bool timing) override {
    event = reinterpret_cast<CUevent>(uintptr_t(0x900000 + 16 * ++eventsCreated_));
    events_[event] = EventState{timing, false, 0};
    return CUDA_SUCCESS;
  }
  CUresult recordEvent(CUevent event, CUstream stream) override {
    auto it = events_.find(event);
    if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
    it->second.recorded = true;
    it->second.doneAt = std::max(now_, streamDone(stream));
    return CUDA_SUCCESS;
  }
  CUresult queryEvent(CUevent event) override {
    auto it = events_.find(event);
    if (it == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
    return !it->second.recorded || it->second.doneAt <= now_ ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  }
  CUresult elapsedMillis(float& ms, CUevent start, CUevent end) override {
    auto a = events_.find(start), b = events_.find(end);
    if (a == events_.end() || b == events_.end() || !a->second.timing || !b->second.timing) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    if (queryEvent(start) != CUDA_SUCCESS || queryEvent(end) != CUDA_SUCCESS) return CUDA_ERROR_NOT_READY;
    ms = float(double(b->second.doneAt - a->second.doneAt) / 1e6);
    return CUDA_SUCCESS;
  }
  void destroyEvent(CUevent event) override {
    if (events_.erase(event) == 0) ++badDestroys_;
  }
  size_t liveEvents() const { return events_.size(); }
  size_t badDestroys() const { return badDestroys_; }

 private:
  struct Storage {
    alignas(gpu::Gpu) std::byte bytes[sizeof(gpu::Gpu)];
  };
  struct FakeGpu {
    std::unique_ptr<Storage> storage;
    FakeGpuSpec spec;
  };
  struct Write {
    Nanos at;
    CUdeviceptr address;
    uint32_t value;
  };
  struct EventState {
    bool timing = false;
    bool recorded = false;
    Nanos doneAt = 0;
  };

  const FakeGpuSpec& spec(const gpu::Gpu* g) const {
    for (const FakeGpu& f : gpus_) {
      if (reinterpret_cast<const gpu::Gpu*>(f.storage.get()) == g) return f.spec;
    }
    std::abort();  // a GPU the test did not add
  }
  Nanos duration(CUfunction f) const {
    auto it = durations_.find(f);
    return it == durations_.end() ? 10 * kMicros : it->second;
  }
  // Queues `d` of work on the stream: it starts once the stream's earlier work is done.
  FakeLaunch queue(LaunchKind kind, CUstream stream, CUfunction f, uint64_t blocks, Nanos d) {
    FakeLaunch l;
    l.kind = kind;
    l.tenant = owners_.count(stream) != 0 ? owners_.at(stream) : 0;
    l.stream = stream;
    l.function = f;
    l.blocks = blocks;
    l.queued = now_;
    l.start = std::max(now_, streamDone(stream));
    l.end = l.start + d;
    tails_[stream] = l.end;
    return l;
  }
  CUresult record(const FakeLaunch& l) {
    launches.push_back(l);
    return CUDA_SUCCESS;
  }
  void release(void* host) {
    for (auto it = memory_.begin(); it != memory_.end(); ++it) {
      if (it->get() == host) {
        memory_.erase(it);
        return;
      }
    }
  }

  Nanos now_ = 0;
  std::deque<FakeGpu> gpus_;
  std::map<CUstream, uint64_t> owners_;
  std::map<CUstream, Nanos> tails_;
  std::map<CUfunction, Nanos> durations_;
  std::map<CUfunction, int> blocksPerSm_;
  std::vector<Write> writes_;
  std::map<CUevent, EventState> events_;
  size_t eventsCreated_ = 0, badDestroys_ = 0;
  std::vector<std::unique_ptr<uint64_t[]>> memory_;
};

}  // namespace tally::server::scheduler::sim
