// GPU equivalence of the kernel variants (issue #3), and their benchmark.
//
//   tally_transform_gpu CORPUS.ptx...              equivalence: for every eligible kernel, the
//       original vs the sliced variant (several slice counts) vs the PTB variant (several worker
//       counts) vs the PTB variant preempted and resumed at random points; bitwise-identical
//       buffers required for deterministic kernels. Exit 0 all equal, 1 a mismatch or CUDA
//       error, 77 no GPU visible (skipped, with the reason printed).
//   tally_transform_gpu --bench --json OUT CORPUS.ptx...
//       each eligible kernel at a larger size: time of the original vs sliced vs PTB (medians of
//       CUDA-event timings) and the preemption latency (retreat raised -> kernel gone).
//
// Runs on the driver directly (through tallyd's driver shim): the variants come from the same
// code tallyd uses (server/transform, server/gpu/variant_launch).
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/gpu/driver_loader.h"
#include "server/gpu/variant_launch.h"
#include "server/transform/cache/compile_ptx.h"
#include "server/transform/eligibility.h"
#include "server/transform/parser.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"
#include "server/transform/variant_module.h"
#include "tests/transform/gpu/kernel_specs.h"

namespace {

namespace gpu = tally::server::gpu;
namespace transform = tally::server::transform;
using tally::test::KernelSpec;

constexpr int kExitSkip = 77;

struct CudaError {
  std::string what;
};

void check(CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    throw CudaError{what + ": " + (name ? name : std::to_string(r))};
  }
}

// ---- parameters from the PTX declaration ------------------------------------------------------

enum class ParamKind { kPointer, kInteger, kFloat, kDouble, kStruct };
struct ParamInfo {
  ParamKind kind = ParamKind::kInteger;
  uint32_t bytes = 0;
};

ParamInfo paramInfo(const transform::Param& p) {
  ParamInfo info;
  bool array = false;
  uint32_t arrayBytes = 0;
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    const std::string& t = p.tokens[i].text;
    if (t == "[" && i + 1 < p.tokens.size()) {
      array = true;
      arrayBytes = static_cast<uint32_t>(std::stoul(p.tokens[i + 1].text));
    }
    if (t.size() < 3 || t[0] != '.') continue;
    char c = t[1];
    if ((c == 'u' || c == 's' || c == 'b' || c == 'f') && std::isdigit(static_cast<unsigned char>(t[2]))) {
      uint32_t bits = static_cast<uint32_t>(std::stoul(t.substr(2)));
      info.bytes = bits / 8;
      info.kind = c == 'f' ? (bits == 64 ? ParamKind::kDouble : ParamKind::kFloat)
                           : (bits == 64 ? ParamKind::kPointer : ParamKind::kInteger);
    }
  }
  if (array) info = {ParamKind::kStruct, arrayBytes * std::max<uint32_t>(info.bytes, 1)};
  return info;
}

// ---- one kernel's arguments and buffers -------------------------------------------------------

class KernelArguments {
 public:
  KernelArguments(const transform::Function& kernel, const KernelSpec& spec, size_t bufferBytes, bool bench)
      : bufferBytes_(bufferBytes) {
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      ParamInfo info = paramInfo(kernel.params[i]);
      std::vector<uint8_t> value(std::max<uint32_t>(info.bytes, 1));
      int index = static_cast<int>(i);
      switch (info.kind) {
        case ParamKind::kPointer:
          if (auto c = spec.countParams.find(index); c != spec.countParams.end()) {
            uint64_t n = bench ? c->second * 16 : c->second;
            std::memcpy(value.data(), &n, 8);
          } else {
            CUdeviceptr p = newBuffer();
            std::memcpy(value.data(), &p, 8);
          }
          break;
        case ParamKind::kInteger: {
          int64_t v = spec.intValue;
          std::memcpy(value.data(), &v, value.size());
          break;
        }
        case ParamKind::kFloat: {
          float v = 1.5f;
          std::memcpy(value.data(), &v, 4);
          break;
        }
        case ParamKind::kDouble: {
          double v = 2.5;
          std::memcpy(value.data(), &v, 8);
          break;
        }
        case ParamKind::kStruct:
          for (size_t b = 0; b < value.size(); ++b) value[b] = static_cast<uint8_t>(b * 7 + 1);
          if (auto at = spec.pointerInStruct.find(index); at != spec.pointerInStruct.end()) {
            CUdeviceptr p = newBuffer();
            std::memcpy(value.data() + at->second, &p, 8);
          }
          break;
      }
      values_.push_back(std::move(value));
    }
    for (auto& v : values_) pointers_.push_back(v.data());
  }

  ~KernelArguments() {
    for (CUdeviceptr p : live_) cuMemFree(p);
    for (CUdeviceptr p : pristine_) cuMemFree(p);
  }

  gpu::KernelParams params() { return {pointers_.data(), pointers_.size()}; }

  // Every buffer back to its initial contents (stream-ordered).
  void restore(CUstream stream) {
    for (size_t i = 0; i < live_.size(); ++i) {
      check(cuMemcpyDtoDAsync(live_[i], pristine_[i], bufferBytes_, stream), "restoring a buffer");
    }
  }

  std::vector<uint8_t> snapshot() {
    std::vector<uint8_t> all(live_.size() * bufferBytes_);
    for (size_t i = 0; i < live_.size(); ++i) {
      check(cuMemcpyDtoH(all.data() + i * bufferBytes_, live_[i], bufferBytes_), "reading a buffer back");
    }
    return all;
  }

 private:
  CUdeviceptr newBuffer() {
    CUdeviceptr live = 0, pristine = 0;
    check(cuMemAlloc(&live, bufferBytes_), "cuMemAlloc");
    check(cuMemAlloc(&pristine, bufferBytes_), "cuMemAlloc");
    // Small values: valid as indices, finite as floats.
    std::vector<uint32_t> pattern(bufferBytes_ / 4);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint32_t>((i * 2654435761u) >> 26);
    check(cuMemcpyHtoD(pristine, pattern.data(), bufferBytes_), "filling a buffer");
    live_.push_back(live);
    pristine_.push_back(pristine);
    return live;
  }

  size_t bufferBytes_;
  std::vector<std::vector<uint8_t>> values_;
  std::vector<void*> pointers_;
  std::vector<CUdeviceptr> live_, pristine_;
};

// ---- the device and the compiled corpus -------------------------------------------------------

struct Device {
  CUdevice device = 0;
  CUcontext context = nullptr;
  std::string arch;
  int smCount = 0;
  CUstream stream = nullptr, side = nullptr, high = nullptr;
  gpu::PtbControl control;
  gpu::PtbHelpers trigger;
};

// Returns an empty string when a GPU is ready, else why not.
std::string openDevice(Device& d) {
  std::string error;
  if (!gpu::driverLoaded(&error)) return "no CUDA driver: " + error;
  if (cuInit(0) != CUDA_SUCCESS) return "cuInit failed: no GPU visible";
  int count = 0;
  if (cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) return "no GPU visible";
  check(cuDeviceGet(&d.device, 0), "cuDeviceGet");
  check(cuDevicePrimaryCtxRetain(&d.context, d.device), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(d.context), "cuCtxSetCurrent");
  int major = 0, minor = 0;
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d.device);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d.device);
  cuDeviceGetAttribute(&d.smCount, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.device);
  d.arch = "sm_" + std::to_string(major * 10 + minor);
  int least = 0, greatest = 0;
  cuCtxGetStreamPriorityRange(&least, &greatest);
  check(cuStreamCreateWithPriority(&d.stream, CU_STREAM_NON_BLOCKING, least), "stream");
  check(cuStreamCreateWithPriority(&d.side, CU_STREAM_NON_BLOCKING, greatest), "side stream");
  check(cuStreamCreateWithPriority(&d.high, CU_STREAM_NON_BLOCKING, greatest), "high-priority stream");
  CUdeviceptr control = 0;
  check(cuMemAlloc(&control, 16), "cuMemAlloc(control)");
  d.control = {control, control + 8};
  if (!d.trigger.load(error)) throw CudaError{error};
  return {};
}

struct CompiledModule {
  std::string file;
  transform::Module original;
  CUmodule module = nullptr;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The corpus file's variant module, compiled for the device. False (with why) if it has none.
bool compileCorpus(const std::string& path, const Device& d, CompiledModule& out, std::string& why) {
  std::string ptx = readFile(path);
  transform::ParseResult parsed = transform::parseModule(ptx);
  if (!parsed.ok) {
    why = "unparseable: " + parsed.error;
    return false;
  }
  transform::VariantModule variants = transform::buildVariantModule(ptx, transform::VariantFamily::kBestEffort);
  if (!variants.ok) {
    why = variants.error;
    return false;
  }
  std::string log;
  std::optional<std::string> cubin = transform::compilePtx(variants.ptx, d.arch, log);
  if (!cubin) throw CudaError{path + ": nvJitLink: " + log};
  check(cuModuleLoadData(&out.module, cubin->data()), path + ": cuModuleLoadData");
  out.file = path;
  out.original = std::move(parsed.module);
  return true;
}

CUfunction functionOrNull(CUmodule m, const std::string& name) {
  CUfunction f = nullptr;
  return cuModuleGetFunction(&f, m, name.c_str()) == CUDA_SUCCESS ? f : nullptr;
}

struct Variants {
  CUfunction original = nullptr, sliced = nullptr, ptb = nullptr;
};

gpu::LaunchShape shapeOf(const KernelSpec& spec) {
  gpu::LaunchShape shape;
  std::copy(std::begin(spec.grid), std::end(spec.grid), shape.grid);
  std::copy(std::begin(spec.block), std::end(spec.block), shape.block);
  shape.sharedMem = spec.sharedMem;
  return shape;
}

uint64_t residentWorkers(const Device& d, CUfunction ptb, const gpu::LaunchShape& shape) {
  int perSm = 0;
  int threads = static_cast<int>(shape.block[0] * shape.block[1] * shape.block[2]);
  check(cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, ptb, threads, shape.sharedMem), "occupancy");
  return std::max<uint64_t>(1, uint64_t(perSm) * d.smCount);
}

// ---- equivalence ------------------------------------------------------------------------------

struct Tally {
  int kernels = 0, runs = 0, mismatches = 0, preemptAttempts = 0, preemptMidKernel = 0;
  std::vector<std::string> notes;
};

class EquivalenceCase {
 public:
  EquivalenceCase(Device& d, const transform::Function& kernel, const Variants& v, Tally& tally)
      : d_(d), name_(kernel.name), spec_(tally::test::specFor(kernel.name)), shape_(shapeOf(spec_)),
        args_(kernel, spec_, 16u << 20, false), v_(v), tally_(tally), rng_(std::hash<std::string>{}(kernel.name)) {}

  void run() {
    reference_ = runOnce([&] { return launchOriginal(); });
    bool deterministic = spec_.nondeterministic.empty();
    if (deterministic && runOnce([&] { return launchOriginal(); }) != reference_) {
      tally_.notes.push_back(name_ + ": two native runs differ; compared for errors only");
      deterministic = false;
    }
    deterministic_ = deterministic;
    const uint64_t total = shape_.blocks();
    if (v_.sliced != nullptr) {
      for (uint64_t slices : {uint64_t(2), uint64_t(3), uint64_t(7), total}) {
        compare("sliced x" + std::to_string(slices),
                [&] { return gpu::launchSliced(v_.sliced, shape_, d_.stream, args_.params(), slices); });
      }
    }
    if (v_.ptb != nullptr) {
      uint64_t full = residentWorkers(d_, v_.ptb, shape_);
      for (gpu::PtbWorkers workers : {gpu::PtbWorkers{1, 1}, gpu::PtbWorkers{2, 1}, gpu::PtbWorkers{5, 3},
                                      gpu::PtbWorkers{full, 1}, gpu::PtbWorkers{full, 7}}) {
        compare("ptb workers=" + std::to_string(workers.workers) + " chunk=" + std::to_string(workers.chunk), [&] {
          if (CUresult r = gpu::resetPtb(d_.control, d_.stream); r != CUDA_SUCCESS) return r;
          return gpu::launchPtb(v_.ptb, shape_, d_.stream, args_.params(), workers, d_.control);
        });
      }
      for (int trial = 0; trial < 3; ++trial) comparePreempted(full);
      countMidKernelPreemption();
    }
  }

 private:
  template <typename Launch>
  std::vector<uint8_t> runOnce(Launch launch) {
    args_.restore(d_.stream);
    check(launch(), name_ + ": launch");
    check(cuStreamSynchronize(d_.stream), name_ + ": execution");
    ++tally_.runs;
    return args_.snapshot();
  }

  CUresult launchOriginal() {
    return cuLaunchKernel(v_.original, shape_.grid[0], shape_.grid[1], shape_.grid[2], shape_.block[0],
                          shape_.block[1], shape_.block[2], shape_.sharedMem, d_.stream, args_.params().values,
                          nullptr);
  }

  template <typename Launch>
  void compare(const std::string& what, Launch launch) {
    std::vector<uint8_t> out = runOnce(launch);
    if (deterministic_ && out != reference_) {
      size_t at = std::mismatch(out.begin(), out.end(), reference_.begin()).first - out.begin();
      std::printf("MISMATCH %s %s: first differing byte %zu of %zu\n", name_.c_str(), what.c_str(), at, out.size());
      ++tally_.mismatches;
    }
  }

  // Random worker count and one to three preemption points.
  void comparePreempted(uint64_t fullWorkers) {
    const uint64_t total = shape_.blocks();
    gpu::PtbWorkers workers{std::uniform_int_distribution<uint64_t>(1, fullWorkers)(rng_),
                            std::uniform_int_distribution<uint32_t>(1, 4)(rng_)};
    std::vector<uint64_t> thresholds(std::uniform_int_distribution<int>(1, 3)(rng_));
    for (auto& t : thresholds) t = std::uniform_int_distribution<uint64_t>(1, std::max<uint64_t>(total - 1, 1))(rng_);
    std::sort(thresholds.begin(), thresholds.end());
    std::string what = "ptb workers=" + std::to_string(workers.workers) + " chunk=" + std::to_string(workers.chunk) +
                       " preempted at";
    for (uint64_t t : thresholds) what += " " + std::to_string(t);
    compare(what, [&] {
      return gpu::launchPtbPreempted(v_.ptb, shape_, d_.stream, d_.side, args_.params(), workers, d_.control,
                                     thresholds, d_.trigger);
    });
  }

  // One worker, stopped at half the grid: did the retreat land inside the kernel? (With tiny
  // kernels the trigger can fire only after the grid is done, which is correct but preempts
  // nothing; this counts how often the test really stopped a kernel midway.)
  void countMidKernelPreemption() {
    const uint64_t total = shape_.blocks();
    if (total < 4) return;
    uint64_t threshold = total / 2;
    args_.restore(d_.stream);
    check(gpu::resetPtb(d_.control, d_.stream), "reset");
    check(cuStreamSynchronize(d_.stream), "reset");
    check(d_.trigger.launch(d_.side, d_.control, threshold, 200'000'000), "trigger");
    check(gpu::launchPtb(v_.ptb, shape_, d_.stream, args_.params(), {1, 1}, d_.control), name_ + ": ptb");
    check(cuStreamSynchronize(d_.side), "trigger");
    check(cuStreamSynchronize(d_.stream), name_ + ": ptb");
    uint64_t progress = 0;
    check(cuMemcpyDtoH(&progress, d_.control.progress, 8), "progress");
    ++tally_.preemptAttempts;
    if (progress >= threshold && progress < total) ++tally_.preemptMidKernel;
    // Resume and check the result like any other run.
    check(gpu::clearRetreat(d_.control, d_.stream), "clear");
    check(gpu::launchPtb(v_.ptb, shape_, d_.stream, args_.params(), {3, 2}, d_.control), name_ + ": ptb resume");
    check(cuStreamSynchronize(d_.stream), name_ + ": ptb resume");
    std::vector<uint8_t> out = args_.snapshot();
    ++tally_.runs;
    if (deterministic_ && out != reference_) {
      std::printf("MISMATCH %s ptb stopped at %llu of %llu and resumed\n", name_.c_str(),
                  static_cast<unsigned long long>(progress), static_cast<unsigned long long>(total));
      ++tally_.mismatches;
    }
  }

  Device& d_;
  std::string name_;
  KernelSpec spec_;
  gpu::LaunchShape shape_;
  KernelArguments args_;
  Variants v_;
  Tally& tally_;
  std::mt19937_64 rng_;
  std::vector<uint8_t> reference_;
  bool deterministic_ = true;
};

// ---- benchmark --------------------------------------------------------------------------------

struct Summary {
  double p10 = 0, p50 = 0, p90 = 0, p99 = 0;
  size_t n = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))]; };
  s.p10 = at(0.10), s.p50 = at(0.50), s.p90 = at(0.90), s.p99 = at(0.99);
  return s;
}

std::string json(const Summary& s) {
  std::ostringstream o;
  o << "{\"p10\":" << s.p10 << ",\"p50\":" << s.p50 << ",\"p90\":" << s.p90 << ",\"p99\":" << s.p99
    << ",\"n\":" << s.n << "}";
  return o.str();
}

template <typename Launch>
Summary timeLaunches(Device& d, Launch launch, int repeats) {
  CUevent start = nullptr, stop = nullptr;
  check(cuEventCreate(&start, CU_EVENT_DEFAULT), "event");
  check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "event");
  std::vector<double> us;
  for (int i = -3; i < repeats; ++i) {
    check(cuEventRecord(start, d.stream), "record");
    check(launch(), "bench launch");
    check(cuEventRecord(stop, d.stream), "record");
    check(cuEventSynchronize(stop), "bench execution");
    float ms = 0;
    cuEventElapsedTime(&ms, start, stop);
    if (i >= 0) us.push_back(ms * 1000.0);
  }
  cuEventDestroy(start);
  cuEventDestroy(stop);
  return summarize(us);
}

// Retreat raised from the host (a memset on a high-priority stream, as the scheduler does)
// at a random moment of a PTB run -> the run's stream is idle. Runs that ended before the
// raise are not samples.
std::vector<double> preemptionLatencies(Device& d, CUfunction ptb, const gpu::LaunchShape& shape,
                                        gpu::KernelParams params, gpu::PtbWorkers workers, double kernelUs,
                                        int trials) {
  std::vector<double> us;
  std::mt19937_64 rng(42);
  for (int i = 0; i < trials; ++i) {
    check(gpu::resetPtb(d.control, d.stream), "reset");
    check(cuStreamSynchronize(d.stream), "reset");
    check(gpu::launchPtb(ptb, shape, d.stream, params, workers, d.control), "ptb");
    auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(5, std::max(6, int(kernelUs * 0.8)))(rng));
    std::this_thread::sleep_for(delay);
    auto raised = std::chrono::steady_clock::now();
    check(cuMemsetD32Async(d.control.retreat, 1, 1, d.high), "raise");
    while (cuStreamQuery(d.stream) == CUDA_ERROR_NOT_READY) {
    }
    auto gone = std::chrono::steady_clock::now();
    check(cuStreamSynchronize(d.high), "raise");
    uint64_t progress = 0;
    check(cuMemcpyDtoH(&progress, d.control.progress, 8), "progress");
    if (progress < shape.blocks()) us.push_back(std::chrono::duration<double, std::micro>(gone - raised).count());
  }
  return us;
}

std::string benchKernel(Device& d, const transform::Function& kernel, const Variants& v) {
  KernelSpec spec = tally::test::specFor(kernel.name);
  if (spec.nondeterministic == "prints") return {};
  gpu::LaunchShape shape = shapeOf(spec);
  shape.grid[0] = spec.benchGridX != 0 ? spec.benchGridX : spec.grid[0] * 64;
  if (spec.intValue == KernelSpec{}.intValue) spec.intValue = int64_t(shape.grid[0]) * shape.block[0];
  KernelArguments args(kernel, spec, 64u << 20, true);
  args.restore(d.stream);
  const int repeats = 20;
  Summary original = timeLaunches(d, [&] {
    return cuLaunchKernel(v.original, shape.grid[0], shape.grid[1], shape.grid[2], shape.block[0], shape.block[1],
                          shape.block[2], shape.sharedMem, d.stream, args.params().values, nullptr);
  }, repeats);
  std::ostringstream o;
  o << "{\"kernel\":\"" << kernel.name << "\",\"blocks\":" << shape.blocks() << ",\"original_us\":" << json(original);
  if (v.sliced != nullptr) {
    Summary sliced = timeLaunches(d, [&] { return gpu::launchSliced(v.sliced, shape, d.stream, args.params(), 4); },
                                  repeats);
    o << ",\"sliced4_us\":" << json(sliced);
  }
  if (v.ptb != nullptr) {
    // One full wave of workers; chunk 1 and the fastest chunk (what the scheduler picks when the
    // retreat latency it costs stays inside its budget), each with its retreat latency.
    const uint64_t full = residentWorkers(d, v.ptb, shape);
    auto timePtb = [&](uint32_t chunk) {
      return timeLaunches(d, [&] {
        if (CUresult r = gpu::resetPtb(d.control, d.stream); r != CUDA_SUCCESS) return r;
        return gpu::launchPtb(v.ptb, shape, d.stream, args.params(), {full, chunk}, d.control);
      }, repeats);
    };
    Summary chunk1 = timePtb(1);
    uint32_t bestChunk = 1;
    Summary best = chunk1;
    for (uint32_t chunk : {4u, 16u, 64u}) {
      Summary s = timePtb(chunk);
      if (s.p50 < best.p50) best = s, bestChunk = chunk;
    }
    auto latency = [&](uint32_t chunk) {
      return summarize(preemptionLatencies(d, v.ptb, shape, args.params(), {full, chunk}, original.p50, 30));
    };
    o << ",\"ptb_workers\":" << full << ",\"ptb_us\":" << json(chunk1) << ",\"preempt_latency_us\":" << json(latency(1))
      << ",\"ptb_best_chunk\":" << bestChunk << ",\"ptb_best_us\":" << json(best)
      << ",\"preempt_latency_best_us\":" << json(latency(bestChunk));
  }
  o << "}";
  return o.str();
}

// ---- driver -----------------------------------------------------------------------------------

struct Options {
  bool bench = false;
  std::string json;
  std::vector<std::string> files;
};

int runAll(const Options& options, Device& d) {
  Tally tally;
  std::vector<std::string> benchRows;
  std::vector<CompiledModule> modules;
  for (const std::string& file : options.files) {
    CompiledModule m;
    std::string why;
    if (!compileCorpus(file, d, m, why)) {
      std::printf("%s: no variants (%s)\n", file.c_str(), why.c_str());
      continue;
    }
    for (const transform::Eligibility& e : transform::analyzeModule(m.original)) {
      if (!e.eligible) continue;
      Variants v{functionOrNull(m.module, e.kernel),
                 functionOrNull(m.module, e.kernel + transform::kSlicedSuffix),
                 e.ptbEligible ? functionOrNull(m.module, e.kernel + transform::kPtbSuffix) : nullptr};
      if (v.original == nullptr || v.sliced == nullptr || (e.ptbEligible && v.ptb == nullptr)) {
        throw CudaError{file + ": " + e.kernel + ": a variant is missing from the compiled module"};
      }
      const transform::Function* kernel = nullptr;
      for (const auto& item : m.original.items) {
        if (item.kind == transform::ItemKind::kFunction && item.function.name == e.kernel) kernel = &item.function;
      }
      std::printf("%s %s%s\n", options.bench ? "bench" : "check", e.kernel.c_str(), v.ptb ? "" : " (sliced only)");
      std::fflush(stdout);
      if (options.bench) {
        if (std::string row = benchKernel(d, *kernel, v); !row.empty()) benchRows.push_back(row);
      } else {
        EquivalenceCase(d, *kernel, v, tally).run();
      }
      ++tally.kernels;
    }
    modules.push_back(std::move(m));
  }
  if (options.bench) {
    std::ofstream out(options.json);
    out << "{\"device\":\"" << d.arch << "\",\"kernels\":[\n";
    for (size_t i = 0; i < benchRows.size(); ++i) out << benchRows[i] << (i + 1 < benchRows.size() ? ",\n" : "\n");
    out << "]}\n";
    std::printf("benchmarked %d kernels -> %s\n", tally.kernels, options.json.c_str());
    return 0;
  }
  for (const std::string& note : tally.notes) std::printf("note: %s\n", note.c_str());
  std::printf("equivalence: %d kernels, %d runs, %d mismatches; PTB stopped mid-kernel in %d of %d attempts\n",
              tally.kernels, tally.runs, tally.mismatches, tally.preemptMidKernel, tally.preemptAttempts);
  return tally.mismatches == 0 && tally.kernels > 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--bench") {
      options.bench = true;
    } else if (arg == "--json" && i + 1 < argc) {
      options.json = argv[++i];
    } else {
      options.files.push_back(arg);
    }
  }
  if (options.files.empty() || (options.bench && options.json.empty())) {
    std::fprintf(stderr, "usage: tally_transform_gpu [--bench --json OUT] CORPUS.ptx...\n");
    return 2;
  }
  try {
    Device d;
    if (std::string why = openDevice(d); !why.empty()) {
      std::printf("SKIP: %s\n", why.c_str());
      return kExitSkip;
    }
    return runAll(options, d);
  } catch (const CudaError& e) {
    std::printf("FAILED: %s\n", e.what.c_str());
    return 1;
  }
}
