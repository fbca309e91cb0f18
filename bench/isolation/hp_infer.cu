// Inference-like high-priority client for the isolation benchmark (bench/isolation/run.sh).
//
// A request copies an input in, runs a chain of kernels (per layer: a tiled GEMM, bias + GELU,
// a row reduction and a normalisation) and copies the result out, then synchronizes. Requests
// arrive open-loop on a seeded Poisson schedule; a request that arrives while the previous one
// runs waits (one in flight, as a single-stream server). Prints one JSON object:
//   service  = completion - start of the request        (µs, p50/p99/mean)
//   response = completion - scheduled arrival           (µs, p50/p99/mean)
//
//   hp_infer --solo SECONDS            closed loop: back-to-back requests (the solo service time)
//   hp_infer --rate REQ_PER_S --seconds S [--seed N]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "hp_infer: %s failed: %s\n", #x, cudaGetErrorString(e_));        \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

constexpr int kDim = 1024;   // activations kDim x kDim, weights kDim x kDim
constexpr int kLayers = 12;  // 4 kernels per layer: 48 kernels per request
constexpr int kTile = 16;

__global__ void gemm(const float* a, const float* b, float* c, int n) {
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

__global__ void biasGelu(float* x, const float* bias, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n * n) {
    float v = x[i] + bias[i % n];
    x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
}

__global__ void rowSum(const float* x, float* sums, int n) {
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

__global__ void normalize(float* x, const float* means, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n * n) x[i] = (x[i] - means[i / n]) * 0.05f;
}

struct Model {
  float *act[2], *weight[kLayers], *bias, *sums, *hostIn, *hostOut;
  cudaStream_t stream;
};

Model makeModel() {
  Model m;
  size_t bytes = size_t(kDim) * kDim * sizeof(float);
  std::vector<float> init(size_t(kDim) * kDim);
  for (size_t i = 0; i < init.size(); ++i) init[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  for (auto& a : m.act) CHECK(cudaMalloc(&a, bytes));
  for (auto& w : m.weight) {
    CHECK(cudaMalloc(&w, bytes));
    CHECK(cudaMemcpy(w, init.data(), bytes, cudaMemcpyHostToDevice));
  }
  CHECK(cudaMalloc(&m.bias, kDim * sizeof(float)));
  CHECK(cudaMemcpy(m.bias, init.data(), kDim * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMalloc(&m.sums, kDim * sizeof(float)));
  CHECK(cudaMallocHost(&m.hostIn, bytes));
  CHECK(cudaMallocHost(&m.hostOut, bytes));
  std::memcpy(m.hostIn, init.data(), bytes);
  CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  return m;
}

void runRequest(Model& m) {
  size_t bytes = size_t(kDim) * kDim * sizeof(float);
  CHECK(cudaMemcpyAsync(m.act[0], m.hostIn, bytes, cudaMemcpyHostToDevice, m.stream));
  int cur = 0;
  dim3 tile(kTile, kTile), tiles(kDim / kTile, kDim / kTile);
  int elems = kDim * kDim, threads = 256, blocks = (elems + threads - 1) / threads;
  for (int l = 0; l < kLayers; ++l) {
    gemm<<<tiles, tile, 0, m.stream>>>(m.act[cur], m.weight[l], m.act[1 - cur], kDim);
    cur = 1 - cur;
    biasGelu<<<blocks, threads, 0, m.stream>>>(m.act[cur], m.bias, kDim);
    rowSum<<<kDim, 256, 0, m.stream>>>(m.act[cur], m.sums, kDim);
    normalize<<<blocks, threads, 0, m.stream>>>(m.act[cur], m.sums, kDim);
  }
  CHECK(cudaMemcpyAsync(m.hostOut, m.act[cur], bytes, cudaMemcpyDeviceToHost, m.stream));
  CHECK(cudaStreamSynchronize(m.stream));
  CHECK(cudaGetLastError());
}

using Clock = std::chrono::steady_clock;
double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Stats {
  double p50 = 0, p99 = 0, mean = 0;
};
Stats stats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5))]; };
  s.p50 = at(0.5);
  s.p99 = at(0.99);
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  double solo = 0, rate = 0, seconds = 10;
  unsigned seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--solo") solo = std::atof(argv[i + 1]);
    else if (a == "--rate") rate = std::atof(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--seed") seed = unsigned(std::atoi(argv[i + 1]));
  }
  if (solo <= 0 && rate <= 0) {
    std::fprintf(stderr, "usage: hp_infer --solo SECONDS | --rate REQ_PER_S --seconds S [--seed N]\n");
    return 2;
  }
  Model m = makeModel();
  for (int i = 0; i < 20; ++i) runRequest(m);  // warm-up (module load, clocks)
  std::vector<double> service, response;
  double worstService = 0, worstAt = 0;  // the slowest request and when it started (s since begin)
  const auto begin = Clock::now();
  if (solo > 0) {
    while (micros(Clock::now() - begin) < solo * 1e6) {
      auto start = Clock::now();
      runRequest(m);
      double s = micros(Clock::now() - start);
      service.push_back(s);
      response.push_back(s);
    }
  } else {
    std::mt19937 rng(seed);
    std::exponential_distribution<double> gap(rate);
    double arrival = 0;  // seconds since begin
    while (arrival < seconds) {
      arrival += gap(rng);
      auto scheduled = begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(arrival));
      std::this_thread::sleep_until(scheduled);
      auto start = Clock::now();
      runRequest(m);
      auto end = Clock::now();
      service.push_back(micros(end - start));
      response.push_back(micros(end - scheduled));
      if (service.back() > worstService) {
        worstService = service.back();
        worstAt = micros(start - begin) / 1e6;
      }
    }
  }
  double elapsed = micros(Clock::now() - begin) / 1e6;
  Stats s = stats(service), r = stats(response);
  std::printf("{\"requests\":%zu,\"seconds\":%.3f,\"service_us\":{\"p50\":%.1f,\"p99\":%.1f,\"mean\":%.1f},"
              "\"response_us\":{\"p50\":%.1f,\"p99\":%.1f,\"mean\":%.1f},\"worst_service_us\":%.1f,\"worst_at_s\":%.3f}\n",
              service.size(), elapsed, s.p50, s.p99, s.mean, r.p50, r.p99, r.mean, worstService, worstAt);
  return 0;
}
