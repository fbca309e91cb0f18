// The isolation benchmark's high-priority (inference-like) workload, on a stream the caller
// gives: used by hp_infer (its own process) and green_split (a thread in an SM partition).
//
// A request copies an input in, runs a chain of kernels (per layer: a tiled GEMM, bias + GELU,
// a row reduction and a normalisation) and synchronizes its stream once. Two request kinds:
//   large  12 layers at 1024 x 1024: 48 kernels, ~3.7 ms on the H200, 4 MiB copied in and out
//   small   2 layers at  640 x  640:  8 kernels, ~200 µs (scaled from large's GEMM rate), 1.6 MB in
// Every kernel of both spans all SMs (the smallest grid, small's row reduction, has 640 blocks).
// Requests arrive open-loop on a seeded Poisson schedule; one that arrives while the previous one
// runs waits (one in flight, as a single-stream server).
// Chained (hp_infer --pdl): the application itself uses programmatic dependent launch (sm_90), each
// kernel waiting for its predecessor in the kernel and letting its successor be scheduled early:
// the native reference for what tallyd does to a high-priority tenant's kernels with PTX.
#pragma once

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common.cuh"

namespace isolation {

constexpr int kTile = 16;

// A chained kernel's first statements: wait until the previous kernel of the stream has finished
// and its writes are visible, then let the next one be scheduled (both no-ops without PDL).
template <bool Chained>
__device__ __forceinline__ void chainPrologue() {
  if constexpr (Chained) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
}

template <bool Chained>
__global__ void gemm(const float* a, const float* b, float* c, int n) {
  chainPrologue<Chained>();
  __shared__ float ta[kTile][kTile], tb[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < n; t += kTile) {
    ta[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];
    tb[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < kTile; ++k) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = acc;
}

template <bool Chained>
__global__ void biasGelu(float* x, const float* bias, int n) {
  chainPrologue<Chained>();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n * n) {
    float v = x[i] + bias[i % n];
    x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

template <bool Chained>
__global__ void rowSum(const float* x, float* sums, int n) {
  chainPrologue<Chained>();
  __shared__ float part[256];
  float s = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) s += x[blockIdx.x * n + j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = part[0] / n;
}

template <bool Chained>
__global__ void normalize(float* x, const float* means, int n) {
  chainPrologue<Chained>();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n * n) x[i] = (x[i] - means[i / n]) * 0.05f;
}

struct RequestKind {
  std::string name;
  int dim;       // activations and weights are dim x dim (a multiple of kTile)
  int layers;    // 4 kernels each
  bool copyOut;  // large copies its whole output back, as the original benchmark did
};

inline RequestKind requestKind(const std::string& name) {
  // small's dim: large's GEMM runs at ~7 TFLOP/s (12 x 2 x 1024^3 flop in ~3.6 ms); two 640^3
  // GEMMs (with the 1.5-wave tail of a 40 x 40 tile grid) plus six short kernels give ~200 µs.
  if (name == "large") return {name, 1024, 12, true};
  if (name == "small") return {name, 640, 2, false};
  fail("--request must be large or small, not " + name);
}

class HpModel {
 public:
  HpModel(const RequestKind& kind, cudaStream_t stream, bool chained = false)
      : kind_(kind), stream_(stream), chained_(chained) {
    const size_t n = size_t(kind.dim) * kind.dim;
    std::vector<float> init(n);
    for (size_t i = 0; i < n; ++i) init[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (auto& a : act_) CHECK(cudaMalloc(&a, bytes()));
    weights_.resize(kind.layers);
    for (auto& w : weights_) {
      CHECK(cudaMalloc(&w, bytes()));
      CHECK(cudaMemcpy(w, init.data(), bytes(), cudaMemcpyHostToDevice));
    }
    CHECK(cudaMalloc(&bias_, kind.dim * sizeof(float)));
    CHECK(cudaMemcpy(bias_, init.data(), kind.dim * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&sums_, kind.dim * sizeof(float)));
    CHECK(cudaMallocHost(&hostIn_, bytes()));
    CHECK(cudaMallocHost(&hostOut_, bytes()));
    std::memcpy(hostIn_, init.data(), bytes());
  }

  const RequestKind& kind() const { return kind_; }

  void request() {
    const int n = kind_.dim;
    CHECK(cudaMemcpyAsync(act_[0], hostIn_, bytes(), cudaMemcpyHostToDevice, stream_));
    int cur = 0;
    dim3 tile(kTile, kTile), tiles(n / kTile, n / kTile);
    int threads = 256, blocks = (n * n + threads - 1) / threads;
    for (int l = 0; l < kind_.layers; ++l) {
      if (chained_) {
        launchChained(gemm<true>, tiles, tile, act_[cur], weights_[l], act_[1 - cur], n);
        cur = 1 - cur;
        launchChained(biasGelu<true>, dim3(blocks), dim3(threads), act_[cur], (const float*)bias_, n);
        launchChained(rowSum<true>, dim3(n), dim3(256), (const float*)act_[cur], sums_, n);
        launchChained(normalize<true>, dim3(blocks), dim3(threads), act_[cur], (const float*)sums_, n);
        continue;
      }
      gemm<false><<<tiles, tile, 0, stream_>>>(act_[cur], weights_[l], act_[1 - cur], n);
      cur = 1 - cur;
      biasGelu<false><<<blocks, threads, 0, stream_>>>(act_[cur], bias_, n);
      rowSum<false><<<n, 256, 0, stream_>>>(act_[cur], sums_, n);
      normalize<false><<<blocks, threads, 0, stream_>>>(act_[cur], sums_, n);
    }
    if (kind_.copyOut) CHECK(cudaMemcpyAsync(hostOut_, act_[cur], bytes(), cudaMemcpyDeviceToHost, stream_));
    CHECK(cudaStreamSynchronize(stream_));
    CHECK(cudaGetLastError());
  }

 private:
  template <typename... Params, typename... Args>
  void launchChained(void (*kernel)(Params...), dim3 grid, dim3 block, Args... args) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.stream = stream_;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&config, kernel, args...));
  }

  size_t bytes() const { return size_t(kind_.dim) * kind_.dim * sizeof(float); }

  RequestKind kind_;
  cudaStream_t stream_;
  bool chained_;
  float* act_[2] = {};
  std::vector<float*> weights_;
  float *bias_ = nullptr, *sums_ = nullptr, *hostIn_ = nullptr, *hostOut_ = nullptr;
};

struct HpLoop {
  double solo = 0;  // > 0: closed loop for this many seconds (the solo service time)
  double rate = 0;  // otherwise: open loop at this many requests per second
  double seconds = 10;
  unsigned seed = 1;
};

struct HpResult {
  std::vector<double> service;   // completion - start (µs)
  std::vector<double> response;  // completion - scheduled arrival (µs)
  std::vector<double> started;   // start, seconds since the loop began
  double seconds = 0;
  double worstService = 0, worstAt = 0;  // the slowest request and when it started (s)
};

inline HpResult runHp(HpModel& model, const HpLoop& loop) {
  for (int i = 0; i < 20; ++i) model.request();  // warm-up (module load, clocks)
  HpResult r;
  std::mt19937 rng(loop.seed);
  std::exponential_distribution<double> gap(loop.rate > 0 ? loop.rate : 1);
  const double length = loop.solo > 0 ? loop.solo : loop.seconds;
  const auto begin = Clock::now();
  double arrival = 0;  // seconds since begin
  while (loop.solo > 0 ? secondsSince(begin) < length : arrival < length) {
    auto scheduled = Clock::now();
    if (loop.solo <= 0) {
      arrival += gap(rng);
      scheduled = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival));
      std::this_thread::sleep_until(scheduled);
    }
    auto start = Clock::now();
    model.request();
    auto end = Clock::now();
    r.service.push_back(micros(end - start));
    r.response.push_back(micros(end - scheduled));
    r.started.push_back(micros(start - begin) / 1e6);
    if (r.service.back() > r.worstService) {
      r.worstService = r.service.back();
      r.worstAt = micros(start - begin) / 1e6;
    }
  }
  r.seconds = secondsSince(begin);
  return r;
}

// Every request, one line each: start (s since the loop began), service and response (µs), for
// looking at a tail request by request (--service-log).
inline void writeServiceLog(const HpResult& r, const std::string& path) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) fail("cannot write " + path);
  std::fprintf(f, "start_s\tservice_us\tresponse_us\n");
  for (size_t i = 0; i < r.service.size(); ++i)
    std::fprintf(f, "%.6f\t%.1f\t%.1f\n", r.started[i], r.service[i], r.response[i]);
  std::fclose(f);
}

struct Percentiles {
  double p50 = 0, p99 = 0, mean = 0;
};

inline Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))]; };
  p.p50 = at(0.5);
  p.p99 = at(0.99);
  for (double x : v) p.mean += x;
  p.mean /= double(v.size());
  return p;
}

// One JSON object, the form bench/isolation/report.py reads.
inline std::string hpJson(const HpResult& r, const RequestKind& kind) {
  Percentiles s = percentiles(r.service), q = percentiles(r.response);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"request\":\"%s\",\"requests\":%zu,\"seconds\":%.3f,"
                "\"service_us\":{\"p50\":%.1f,\"p99\":%.1f,\"mean\":%.1f},"
                "\"response_us\":{\"p50\":%.1f,\"p99\":%.1f,\"mean\":%.1f},"
                "\"worst_service_us\":%.1f,\"worst_at_s\":%.3f}",
                kind.name.c_str(), r.service.size(), r.seconds, s.p50, s.p99, s.mean, q.p50, q.p99, q.mean,
                r.worstService, r.worstAt);
  return buf;
}

}  // namespace isolation
