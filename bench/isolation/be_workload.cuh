// The isolation benchmark's best-effort (training-like) workload, on a stream the caller gives:
// used by be_train (its own process) and green_split (a thread in an SM partition).
//
// One iteration of each shape, the unit of BE throughput (iterations per second):
//   mixed  the original iteration: a kernel of 4 x 8 blocks per SM of ~1 ms blocks, a one-wave
//          kernel whose blocks stride over 256 MiB 4 times, a many-wave elementwise kernel
//   long   one kernel of 4 waves of blocks that each compute for --block-us (default 7.5 ms)
//   short  a burst of 20 kernels of 4 waves of --block-us blocks (default 150 µs)
//   mem    one kernel of one wave whose blocks stride over a 192 MiB -> 192 MiB copy, so every
//          block runs as long as the kernel: --block-us (default 1 ms) sets the passes
// every iteration ends in a stream synchronize. A wave is what fits on all SMs of the device at
// once (occupancy query), so long and short blocks keep every SM full, as large training kernels
// do. The work per iteration is fixed by the device's SM count and the block's loop count, not
// by the SMs a partition leaves the BE: the same launches everywhere.
//
// --block-us is turned into a loop count (passes, for mem) by timing one wave at two counts
// (the slope leaves the launch latency out); --block-iterations sets the count instead, so that
// the co-located runs do exactly the work the BE-alone run calibrated.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "common.cuh"

namespace isolation {

__global__ void spinBlocks(float* out, int iterations) {
  float x = threadIdx.x * 0.001f + blockIdx.x;
  for (int i = 0; i < iterations; ++i) x = x * 0.9999f + 0.0001f * __sinf(x);
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void persistent(float* data, size_t n, int passes) {
  for (int p = 0; p < passes; ++p) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
      data[i] = data[i] * 0.5f + 1.0f;
    }
  }
}

__global__ void elementwise(float* a, const float* b, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) a[i] = a[i] * 1.0001f + b[i];
}

// Each pass writes a different value, so no pass is redundant.
__global__ void copyPasses(const float* src, float* dst, size_t n, int passes) {
  for (int p = 0; p < passes; ++p) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
      dst[i] = src[i] * 0.5f + float(p);
    }
  }
}

enum class BeShape { Mixed, Long, Short, Mem };

struct BeConfig {
  BeShape shape = BeShape::Mixed;
  std::string name = "mixed";
  double blockUs = 0;         // target block length (long, short, mem); 0 for mixed
  long blockIterations = 0;   // loop count of a block (passes for mem); 0: calibrate from blockUs
};

// --shape and --block-us / --block-iterations of a program's options.
inline BeConfig beConfig(Args& args) {
  BeConfig c;
  c.name = args.text("shape", "mixed");
  if (c.name == "mixed") c.shape = BeShape::Mixed;
  else if (c.name == "long") c.shape = BeShape::Long;
  else if (c.name == "short") c.shape = BeShape::Short;
  else if (c.name == "mem") c.shape = BeShape::Mem;
  else fail("--shape must be mixed, long, short or mem, not " + c.name);
  if (c.shape == BeShape::Mixed && args.has("block-us")) fail("--shape mixed has fixed blocks: no --block-us");
  const double defaultUs[] = {0, 7500, 150, 1000};
  c.blockUs = args.number("block-us", defaultUs[int(c.shape)]);
  // mixed keeps the original fixed count (about 1 ms per block on the H200 at 8 blocks per SM).
  c.blockIterations = long(args.number("block-iterations", c.shape == BeShape::Mixed ? 60000 : 0));
  if (c.shape != BeShape::Mixed && c.blockIterations == 0 && c.blockUs <= 0) fail("--block-us must be > 0");
  return c;
}

class BeWorkload {
 public:
  BeWorkload(const BeConfig& config, int sms, cudaStream_t stream) : c_(config), stream_(stream), sms_(sms) {
    int perSm = 0;
    if (c_.shape == BeShape::Mem) {
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, copyPasses, kMemThreads, 0));
      memGrid_ = sms * perSm;
      CHECK(cudaMalloc(&a_, kMemFloats * sizeof(float)));
      CHECK(cudaMalloc(&b_, kMemFloats * sizeof(float)));
      CHECK(cudaMemset(a_, 0, kMemFloats * sizeof(float)));
    } else if (c_.shape == BeShape::Mixed) {
      spinWave_ = sms * 8;  // the original grid: 4 x 8 blocks of 128 threads per SM
      CHECK(cudaMalloc(&a_, kMixedFloats * sizeof(float)));
      CHECK(cudaMalloc(&b_, kMixedFloats * sizeof(float)));
      CHECK(cudaMemset(a_, 0, kMixedFloats * sizeof(float)));
      CHECK(cudaMemset(b_, 0, kMixedFloats * sizeof(float)));
    } else {
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, spinBlocks, kSpinThreads, 0));
      spinWave_ = sms * perSm;
    }
    if (spinWave_ > 0) CHECK(cudaMalloc(&out_, size_t(spinWave_) * 4 * kSpinThreads * sizeof(float)));
  }

  // Sets the loop count from blockUs unless it was given; times launches on `on` (a stream that
  // has the whole GPU, so a partitioned BE calibrates the same block as an unpartitioned one).
  void calibrate(cudaStream_t on) {
    if (c_.blockIterations > 0) return;
    // Two counts: the difference of their times is the blocks' own time, without launch latency.
    const long k = c_.shape == BeShape::Mem ? 2 : 20000;
    double t1 = bestMs(on, k), t2 = bestMs(on, 2 * k);
    double perUnit = t2 > t1 ? (t2 - t1) / double(k) : t2 / double(2 * k);
    c_.blockIterations = std::max(1L, std::lround(c_.blockUs / 1000.0 / perUnit));
  }

  void iteration() {
    switch (c_.shape) {
      case BeShape::Mixed:
        spinBlocks<<<spinWave_ * 4, kSpinThreads, 0, stream_>>>(out_, int(c_.blockIterations));
        persistent<<<sms_ * 2, 512, 0, stream_>>>(a_, kMixedFloats, 4);
        elementwise<<<unsigned((kMixedFloats + 255) / 256), 256, 0, stream_>>>(a_, b_, kMixedFloats);
        break;
      case BeShape::Long:
        spinBlocks<<<spinWave_ * 4, kSpinThreads, 0, stream_>>>(out_, int(c_.blockIterations));
        break;
      case BeShape::Short:
        for (int i = 0; i < kBurst; ++i)
          spinBlocks<<<spinWave_ * 4, kSpinThreads, 0, stream_>>>(out_, int(c_.blockIterations));
        break;
      case BeShape::Mem:
        copyPasses<<<memGrid_, kMemThreads, 0, stream_>>>(a_, b_, kMemFloats, int(c_.blockIterations));
        break;
    }
    CHECK(cudaStreamSynchronize(stream_));
    CHECK(cudaGetLastError());  // a launch the stream refused (e.g. in a green context) fails here
  }

  const BeConfig& config() const { return c_; }

 private:
  static constexpr int kSpinThreads = 128, kMemThreads = 256, kBurst = 20;
  static constexpr size_t kMixedFloats = size_t(64) << 20;  // 256 MiB
  static constexpr size_t kMemFloats = size_t(48) << 20;    // 192 MiB

  // The fastest of three launches of one wave at `count` (ms): the others met clock ramps.
  double bestMs(cudaStream_t on, long count) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int i = 0; i < 4; ++i) {  // the first is a warm-up
      CHECK(cudaEventRecord(start, on));
      if (c_.shape == BeShape::Mem) copyPasses<<<memGrid_, kMemThreads, 0, on>>>(a_, b_, kMemFloats, int(count));
      else spinBlocks<<<spinWave_, kSpinThreads, 0, on>>>(out_, int(count));
      CHECK(cudaEventRecord(stop, on));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i > 0) best = std::min(best, ms);
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    return best;
  }

  BeConfig c_;
  cudaStream_t stream_;
  int sms_, spinWave_ = 0, memGrid_ = 0;
  float *a_ = nullptr, *b_ = nullptr, *out_ = nullptr;
};

struct BeResult {
  long iterations = 0;
  double seconds = 0;
};

// A few warm-up iterations, then `lead` seconds uncounted (a co-located HP starts meanwhile),
// then iterations for `seconds`.
inline BeResult runBe(BeWorkload& be, double lead, double seconds) {
  for (int i = 0; i < 3; ++i) be.iteration();
  for (auto start = Clock::now(); secondsSince(start) < lead;) be.iteration();
  BeResult r;
  const auto begin = Clock::now();
  while (r.seconds < seconds) {
    be.iteration();
    ++r.iterations;
    r.seconds = secondsSince(begin);
  }
  return r;
}

// One JSON object, the form bench/isolation/report.py reads; block_iterations is the loop count
// run.sh passes to the co-located runs of the same BE.
inline std::string beJson(const BeResult& r, const BeConfig& c) {
  char blockUs[32] = "null", buf[320];
  if (c.shape != BeShape::Mixed) std::snprintf(blockUs, sizeof blockUs, "%.1f", c.blockUs);
  std::snprintf(buf, sizeof buf,
                "{\"iterations\":%ld,\"seconds\":%.3f,\"iterations_per_s\":%.3f,\"shape\":\"%s\",\"block_us\":%s,"
                "\"block_iterations\":%ld}",
                r.iterations, r.seconds, r.seconds > 0 ? double(r.iterations) / r.seconds : 0.0, c.name.c_str(),
                blockUs, c.blockIterations);
  return buf;
}

}  // namespace isolation
