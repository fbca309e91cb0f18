// A short inference request, as the high-priority tenant sends it (issue #8's benchmark).
//
// A request copies a small input in (pinned), runs a chain of kernels that each keep every SM busy
// for a fixed GPU time (a %globaltimer spin, so the GPU part is the same natively and through
// tallyd), copies a small output back and synchronizes its stream once. Requests arrive
// open-loop on a seeded Poisson schedule; one is in flight at a time (a request that arrives
// while the previous one runs waits, as in a single-stream server). The GPU time per request
// (--work-us) sets the request length: ~50 us, ~200 us, ~2 ms in bench/hp_request/run.sh.
//
//   hp_request --work-us US [--kernels N] [--rate REQ_PER_S] [--seconds S] [--seed N] [--bytes B]
//
// Prints one JSON object: service = completion - start (what remoting adds to),
// response = completion - scheduled arrival (adds queueing), both in us: p50, p99, p999, mean;
// through tallyd also the messages and round trips one request cost (tallyClientStats).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "hp_request: %s failed: %s\n", #x, cudaGetErrorName(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;

// Every thread spins for `ns` of GPU time, then one thread per block folds the input into the
// output (so the chain has a data dependency and the copies carry real data).
__global__ void layer(const float* in, float* out, int n, long long ns) {
  long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i] * 0.5f + 1.0f;
}

struct Options {
  double workUs = 200;
  int kernels = 8;
  double rate = 0;  // 0: a fifth of what one request at a time could sustain
  double seconds = 4;
  unsigned seed = 1;
  size_t bytes = 64 << 10;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    double v = std::atof(argv[i + 1]);
    if (a == "--work-us") o.workUs = v;
    else if (a == "--kernels") o.kernels = int(v);
    else if (a == "--rate") o.rate = v;
    else if (a == "--seconds") o.seconds = v;
    else if (a == "--seed") o.seed = unsigned(v);
    else if (a == "--bytes") o.bytes = size_t(v);
    else {
      std::fprintf(stderr, "usage: hp_request --work-us US [--kernels N] [--rate R] [--seconds S] [--seed N] [--bytes B]\n");
      std::exit(2);
    }
  }
  if (o.kernels < 1 || o.workUs <= 0 || o.bytes < sizeof(float)) {
    std::fprintf(stderr, "hp_request: --kernels >= 1, --work-us > 0 and --bytes >= 4 are required\n");
    std::exit(2);
  }
  return o;
}

struct Stats {
  double p50, p99, p999, mean;
};

Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, size_t(q * double(v.size())))]; };
  double sum = 0;
  for (double x : v) sum += x;
  return {at(0.50), at(0.99), at(0.999), sum / double(v.size())};
}

// Tally's client exports tallyClientStats (messages, round trips, bytes sent); natively absent.
using ClientStatsFn = int (*)(unsigned long long*);
ClientStatsFn clientStats() { return reinterpret_cast<ClientStatsFn>(dlsym(RTLD_DEFAULT, "tallyClientStats")); }

double usBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int n = int(o.bytes / sizeof(float));
  float *hostIn, *hostOut, *a, *b;
  CHECK(cudaMallocHost(&hostIn, o.bytes));
  CHECK(cudaMallocHost(&hostOut, o.bytes));
  CHECK(cudaMalloc(&a, o.bytes));
  CHECK(cudaMalloc(&b, o.bytes));
  for (int i = 0; i < n; ++i) hostIn[i] = float(i % 1024);
  long long nsPerKernel = (long long)(o.workUs * 1000.0 / o.kernels);

  auto request = [&] {
    CHECK(cudaMemcpyAsync(a, hostIn, o.bytes, cudaMemcpyHostToDevice, stream));
    for (int k = 0; k < o.kernels; ++k) {
      const float* in = (k % 2 == 0) ? a : b;
      float* out = (k % 2 == 0) ? b : a;
      layer<<<sms, 128, 0, stream>>>(in, out, n, nsPerKernel);
    }
    float* last = (o.kernels % 2 == 0) ? a : b;
    CHECK(cudaMemcpyAsync(hostOut, last, o.bytes, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
  };

  // Warm-up, and the solo service time that sets the default rate.
  std::vector<double> warm;
  for (int i = 0; i < 50; ++i) {
    auto t0 = Clock::now();
    request();
    warm.push_back(usBetween(t0, Clock::now()));
  }
  float expect = hostIn[n - 1];
  for (int k = 0; k < o.kernels; ++k) expect = expect * 0.5f + 1.0f;
  if (hostOut[n - 1] != expect) {
    std::fprintf(stderr, "hp_request: wrong result %f (expected %f)\n", hostOut[n - 1], expect);
    return 1;
  }
  double rate = o.rate > 0 ? o.rate : 0.2e6 / summarize(warm).p50;

  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> service, response;
  ClientStatsFn stats = clientStats();
  unsigned long long before[3] = {}, after[3] = {};
  bool counted = stats != nullptr && stats(before) == 0;
  auto begin = Clock::now();
  auto arrival = begin;
  while (usBetween(begin, Clock::now()) < o.seconds * 1e6) {
    arrival += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    while (Clock::now() < arrival) {
      auto left = arrival - Clock::now();
      if (left > std::chrono::microseconds(200)) std::this_thread::sleep_for(left - std::chrono::microseconds(100));
    }
    auto start = std::max(arrival, Clock::now());
    request();
    auto done = Clock::now();
    service.push_back(usBetween(start, done));
    response.push_back(usBetween(arrival, done));
  }
  counted = counted && stats(after) == 0;
  Stats s = summarize(service), r = summarize(response);
  double requests = double(service.size());
  if (counted) {
    std::printf("{\"messages_per_request\":%.2f,\"round_trips_per_request\":%.2f,",
                double(after[0] - before[0]) / requests, double(after[1] - before[1]) / requests);
  } else {
    std::printf("{");
  }
  std::printf(
      "\"work_us\":%.1f,\"kernels\":%d,\"bytes\":%zu,\"rate\":%.1f,\"requests\":%zu,"
      "\"service_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f,\"mean\":%.2f},"
      "\"response_us\":{\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.2f,\"mean\":%.2f}}\n",
      o.workUs, o.kernels, o.bytes, rate, service.size(), s.p50, s.p99, s.p999, s.mean, r.p50, r.p99, r.p999, r.mean);
  return 0;
}
