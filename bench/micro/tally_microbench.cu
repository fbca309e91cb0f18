// tally_microbench: CUDA runtime microbenchmarks used to compare native CUDA
// with CUDA remoted through tallyd (see bench/run_micro.sh).
//
// Usage: tally_microbench <subcommand> [--option value ...]
//   probe         exit 0 if a CUDA device is visible, 77 otherwise (no JSON)
//   sync_rtt      4-byte cudaMemcpy D2H round trip                  [us]
//   launch_async  N empty-kernel launches on one stream + one sync  [us/launch, launches/s]
//   launch_sync   empty-kernel launch + cudaDeviceSynchronize       [us]
//                 and launch + cudaStreamSynchronize ("launch_sync_stream")
//   bandwidth     cudaMemcpy H2D/D2H, pinned/pageable, 4 KiB..1 GiB [GB/s, 1e9 B/s]
//   all           everything above
//
// Every measurement prints ONE JSON object on its own stdout line:
//   {"bench": name, "size": bytes|null, "unit": "...", "median": x, "p10": x,
//    "p90": x, "min": x, "max": x, "n": samples}
// Diagnostics go to stderr. Every CUDA call is checked; on error the error
// name is printed to stderr and the program exits with status 2.
//
// All timing is host wall clock (std::chrono::steady_clock) around synchronous
// calls, so the cost of forwarding a call to a remote server is included (device
// events would not see it). Kernel launches use cudaLaunchKernel directly (what
// <<<>>> compiles to) so that every launch's status is checked without an
// extra cudaGetLastError call inside the timed loop.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double seconds_between(Clock::time_point t0, Clock::time_point t1) {
  double s = std::chrono::duration<double>(t1 - t0).count();
  return s > 1e-9 ? s : 1e-9;  // steady_clock never goes back; guard against 0
}

void check(cudaError_t e, const char* what, int line) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "tally_microbench: %s failed: %s (%s) [line %d]\n", what,
                 cudaGetErrorName(e), cudaGetErrorString(e), line);
    std::fflush(stderr);
    std::exit(2);
  }
}
#define CK(call) check((call), #call, __LINE__)

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "tally_microbench: %s\n", msg.c_str());
  std::fprintf(stderr,
               "usage: tally_microbench {probe|sync_rtt|launch_async|launch_sync|bandwidth|all}"
               " [--device N] [--<option> VALUE ...]\n"
               "  sync_rtt:     --rtt-reps 20000 --rtt-warmup 1000 --rtt-max-s 30\n"
               "  launch_async: --launch-batches 10 --launch-per-batch 100000 --launch-max-s 20\n"
               "  launch_sync:  --sync-reps 10000 --sync-warmup 200 --sync-max-s 3\n"
               "  bandwidth:    --bw-sizes 4096,16384,... --bw-max-size BYTES --bw-budget-s 0.5\n"
               "                --bw-min-reps 3 --bw-max-reps 1000 --bw-kinds pinned,pageable\n"
               "                --bw-dirs h2d,d2h\n");
  std::exit(64);
}

// ---------------------------------------------------------------------------
// Options

const char* const kKnownOptions[] = {
    "device",       "rtt-reps",    "rtt-warmup",  "rtt-max-s",  "launch-batches",
    "launch-per-batch", "launch-max-s", "sync-reps", "sync-warmup", "sync-max-s",
    "bw-sizes",     "bw-max-size", "bw-budget-s", "bw-min-reps", "bw-max-reps",
    "bw-kinds",     "bw-dirs"};

struct Options {
  std::map<std::string, std::string> kv;

  std::string str(const std::string& k, const std::string& def) {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  double num(const std::string& k, double def) {
    auto it = kv.find(k);
    if (it == kv.end()) return def;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != '\0' || !(v >= 0)) usage_error("bad value for --" + k);
    return v;
  }
  long long integer(const std::string& k, long long def) {
    return static_cast<long long>(num(k, static_cast<double>(def)));
  }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// All options, read and checked before the GPU is touched.
struct Config {
  int device = 0;
  long long rtt_reps, rtt_warmup;
  double rtt_max_s;
  long long launch_batches, launch_per_batch;
  double launch_max_s;
  long long sync_reps, sync_warmup;
  double sync_max_s;
  std::vector<long long> bw_sizes;
  double bw_budget_s;
  long long bw_min_reps, bw_max_reps;
  std::vector<std::string> bw_kinds, bw_dirs;
};

Config parse_config(Options& o) {
  Config c;
  c.device = static_cast<int>(o.integer("device", 0));
  c.rtt_reps = std::max<long long>(1, o.integer("rtt-reps", 20000));
  c.rtt_warmup = o.integer("rtt-warmup", 1000);
  c.rtt_max_s = o.num("rtt-max-s", 30);
  c.launch_batches = std::max<long long>(1, o.integer("launch-batches", 10));
  c.launch_per_batch = std::max<long long>(1, o.integer("launch-per-batch", 100000));
  c.launch_max_s = o.num("launch-max-s", 20);
  c.sync_reps = std::max<long long>(1, o.integer("sync-reps", 10000));
  c.sync_warmup = o.integer("sync-warmup", 200);
  c.sync_max_s = o.num("sync-max-s", 3);

  const std::string default_sizes =
      "4096,16384,65536,262144,1048576,4194304,16777216,67108864,268435456,1073741824";
  for (const auto& t : split(o.str("bw-sizes", default_sizes))) {
    char* end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (end == t.c_str() || *end != '\0' || v <= 0) usage_error("bad size in --bw-sizes: " + t);
    c.bw_sizes.push_back(v);
  }
  const long long max_size = o.integer("bw-max-size", 0);
  if (max_size > 0)
    c.bw_sizes.erase(std::remove_if(c.bw_sizes.begin(), c.bw_sizes.end(),
                                    [&](long long v) { return v > max_size; }),
                     c.bw_sizes.end());
  if (c.bw_sizes.empty()) usage_error("no bandwidth sizes left");
  c.bw_budget_s = o.num("bw-budget-s", 0.5);
  c.bw_min_reps = std::max<long long>(1, o.integer("bw-min-reps", 3));
  c.bw_max_reps = std::max<long long>(c.bw_min_reps, o.integer("bw-max-reps", 1000));
  c.bw_kinds = split(o.str("bw-kinds", "pinned,pageable"));
  c.bw_dirs = split(o.str("bw-dirs", "h2d,d2h"));
  for (const auto& k : c.bw_kinds)
    if (k != "pinned" && k != "pageable") usage_error("unknown --bw-kinds entry: " + k);
  for (const auto& d : c.bw_dirs)
    if (d != "h2d" && d != "d2h") usage_error("unknown --bw-dirs entry: " + d);
  if (c.bw_kinds.empty() || c.bw_dirs.empty()) usage_error("empty --bw-kinds or --bw-dirs");
  return c;
}

// ---------------------------------------------------------------------------
// Statistics and output

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  double pos = q * static_cast<double>(sorted.size() - 1);
  size_t i = static_cast<size_t>(std::floor(pos));
  if (i + 1 >= sorted.size()) return sorted.back();
  double f = pos - static_cast<double>(i);
  return sorted[i] + (sorted[i + 1] - sorted[i]) * f;
}

void print_number(const char* key, double v) {
  if (std::isfinite(v))
    std::printf(", \"%s\": %.7g", key, v);
  else
    std::printf(", \"%s\": null", key);
}

// size < 0 prints null.
void emit(const char* bench, long long size, const char* unit, std::vector<double> samples) {
  if (samples.empty()) return;
  std::sort(samples.begin(), samples.end());
  std::printf("{\"bench\": \"%s\", \"size\": ", bench);
  if (size < 0)
    std::printf("null");
  else
    std::printf("%lld", size);
  std::printf(", \"unit\": \"%s\"", unit);
  print_number("median", percentile(samples, 0.5));
  print_number("p10", percentile(samples, 0.1));
  print_number("p90", percentile(samples, 0.9));
  print_number("min", samples.front());
  print_number("max", samples.back());
  std::printf(", \"n\": %zu}\n", samples.size());
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// Kernels

__global__ void empty_kernel() {}

inline cudaError_t launch_empty(cudaStream_t s) {
  void* no_args[1] = {nullptr};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&empty_kernel), dim3(1), dim3(1), no_args,
                          0, s);
}

// ---------------------------------------------------------------------------
// Benchmarks

void bench_sync_rtt(const Config& c) {
  const long long reps = c.rtt_reps, warmup = c.rtt_warmup;
  const double max_s = c.rtt_max_s;

  void* d = nullptr;
  CK(cudaMalloc(&d, 4));
  CK(cudaMemset(d, 0x5a, 4));
  CK(cudaDeviceSynchronize());
  uint32_t host = 0;  // pageable host destination, as in "read back one scalar"

  for (long long i = 0; i < std::max<long long>(1, warmup); ++i)
    CK(cudaMemcpy(&host, d, 4, cudaMemcpyDeviceToHost));
  if (host != 0x5a5a5a5au) {
    std::fprintf(stderr, "tally_microbench: sync_rtt read back 0x%08x, expected 0x5a5a5a5a\n",
                 host);
    std::exit(3);
  }

  std::vector<double> us;
  us.reserve(static_cast<size_t>(reps));
  auto start = Clock::now();
  for (long long i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    CK(cudaMemcpy(&host, d, 4, cudaMemcpyDeviceToHost));
    auto t1 = Clock::now();
    us.push_back(seconds_between(t0, t1) * 1e6);
    if ((i & 255) == 255 && seconds_since(start) > max_s && i >= 1000) break;
  }
  CK(cudaFree(d));
  emit("sync_rtt", 4, "us", std::move(us));
}

void bench_launch_async(const Config& c, cudaStream_t s) {
  const long long batches = c.launch_batches, per_batch = c.launch_per_batch;
  const double max_s = c.launch_max_s;
  const long long min_batches = std::min<long long>(3, batches);

  // Warm-up: first launch loads the module; then fill the launch queue a bit.
  for (int i = 0; i < 2000; ++i) CK(launch_empty(s));
  CK(cudaStreamSynchronize(s));

  std::vector<double> us_per_launch, launches_per_s;
  auto start = Clock::now();
  for (long long b = 0; b < batches; ++b) {
    auto t0 = Clock::now();
    for (long long i = 0; i < per_batch; ++i) CK(launch_empty(s));
    CK(cudaStreamSynchronize(s));
    double dt = seconds_between(t0, Clock::now());
    us_per_launch.push_back(dt * 1e6 / static_cast<double>(per_batch));
    launches_per_s.push_back(static_cast<double>(per_batch) / dt);
    // Past the time limit stop after min_batches, or at once when even that
    // would take more than twice the limit (a very slow transport).
    const double elapsed = seconds_since(start);
    if (elapsed > max_s && (b + 1 >= min_batches || elapsed > 2 * max_s)) {
      std::fprintf(stderr, "tally_microbench: launch_async stopped after %lld batches (%.1f s)\n",
                   b + 1, elapsed);
      break;
    }
  }
  emit("launch_async", -1, "us/launch", std::move(us_per_launch));
  emit("launch_async_rate", -1, "launches/s", std::move(launches_per_s));
}

void bench_launch_sync(const Config& c, cudaStream_t s) {
  const long long reps = c.sync_reps, warmup = c.sync_warmup;
  const double max_s = c.sync_max_s;

  for (int variant = 0; variant < 2; ++variant) {
    const bool device_sync = variant == 0;
    for (long long i = 0; i < warmup; ++i) {
      CK(launch_empty(s));
      if (device_sync)
        CK(cudaDeviceSynchronize());
      else
        CK(cudaStreamSynchronize(s));
    }
    std::vector<double> us;
    us.reserve(static_cast<size_t>(reps));
    auto start = Clock::now();
    for (long long i = 0; i < reps; ++i) {
      auto t0 = Clock::now();
      CK(launch_empty(s));
      if (device_sync)
        CK(cudaDeviceSynchronize());
      else
        CK(cudaStreamSynchronize(s));
      auto t1 = Clock::now();
      us.push_back(seconds_between(t0, t1) * 1e6);
      if ((i & 63) == 63 && i >= 500 && seconds_since(start) > max_s) break;
    }
    emit(device_sync ? "launch_sync" : "launch_sync_stream", -1, "us", std::move(us));
  }
}

// Fills with incompressible pseudo-random data (splitmix64), so a transport that
// compresses cannot look faster than it is.
void fill_random(void* p, size_t bytes, uint64_t seed) {
  uint64_t x = seed;
  auto* w = static_cast<unsigned char*>(p);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(w + i, &z, 8);
  }
  for (; i < bytes; ++i) w[i] = static_cast<unsigned char>(0xa5 ^ i);
}

// Changes one 8-byte word in every 4 KiB page of [p, p+bytes), outside the timed
// region, so that content-addressed caching cannot skip repeated uploads.
void perturb(void* p, size_t bytes, uint64_t rep) {
  auto* c = static_cast<unsigned char*>(p);
  const uint64_t delta = (rep + 1) * 0x9e3779b97f4a7c15ull;
  for (size_t off = 0; off + 8 <= bytes; off += 4096) {
    uint64_t v;
    std::memcpy(&v, c + off, 8);
    v ^= delta;
    std::memcpy(c + off, &v, 8);
  }
}

std::string size_label(long long b) {
  char buf[32];
  if (b >= (1ll << 30) && b % (1ll << 30) == 0)
    std::snprintf(buf, sizeof buf, "%lld GiB", b >> 30);
  else if (b >= (1ll << 20) && b % (1ll << 20) == 0)
    std::snprintf(buf, sizeof buf, "%lld MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    std::snprintf(buf, sizeof buf, "%lld KiB", b >> 10);
  else
    std::snprintf(buf, sizeof buf, "%lld B", b);
  return buf;
}

void bench_bandwidth(const Config& c) {
  const auto& sizes = c.bw_sizes;
  const auto& kinds = c.bw_kinds;
  const auto& dirs = c.bw_dirs;
  const double budget_s = c.bw_budget_s;
  const long long min_reps = c.bw_min_reps, max_reps = c.bw_max_reps;
  const bool want_pinned = std::find(kinds.begin(), kinds.end(), "pinned") != kinds.end();
  const bool want_pageable = std::find(kinds.begin(), kinds.end(), "pageable") != kinds.end();

  const size_t biggest = static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()));

  void* dev = nullptr;
  CK(cudaMalloc(&dev, biggest));
  void* pinned = nullptr;
  if (want_pinned) {
    CK(cudaMallocHost(&pinned, biggest));
    fill_random(pinned, biggest, 1);
  }
  void* pageable = nullptr;
  if (want_pageable) {
    pageable = std::malloc(biggest);
    if (!pageable) {
      std::fprintf(stderr, "tally_microbench: malloc(%zu) failed\n", biggest);
      std::exit(2);
    }
    fill_random(pageable, biggest, 2);  // also faults every page in
  }
  // Device buffer gets non-zero, incompressible content too.
  CK(cudaMemcpy(dev, pinned ? pinned : pageable, biggest, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());

  uint64_t rep_counter = 0;
  for (long long size : sizes) {
    const size_t bytes = static_cast<size_t>(size);
    const int warmup = bytes <= (1u << 20) ? 10 : (bytes <= (64u << 20) ? 3 : 1);
    auto size_start = Clock::now();
    for (const auto& kind : kinds) {
      void* host = kind == "pinned" ? pinned : pageable;
      for (const auto& dir : dirs) {
        const bool h2d = dir == "h2d";
        void* dst = h2d ? dev : host;
        const void* src = h2d ? host : dev;
        const cudaMemcpyKind mk = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;

        for (int i = 0; i < warmup; ++i) CK(cudaMemcpy(dst, src, bytes, mk));

        std::vector<double> gbps;
        auto start = Clock::now();
        for (long long r = 0; r < max_reps; ++r) {
          if (h2d) perturb(host, bytes, ++rep_counter);
          auto t0 = Clock::now();
          CK(cudaMemcpy(dst, src, bytes, mk));
          auto t1 = Clock::now();
          gbps.push_back(static_cast<double>(bytes) / seconds_between(t0, t1) / 1e9);
          if (r + 1 >= min_reps && seconds_since(start) > budget_s) break;
        }
        std::string name = "bandwidth_" + dir + "_" + kind;
        emit(name.c_str(), size, "GB/s", std::move(gbps));
      }
    }
    std::fprintf(stderr, "tally_microbench: bandwidth %s done in %.2f s\n",
                 size_label(size).c_str(), seconds_since(size_start));
  }

  CK(cudaFree(dev));
  if (pinned) CK(cudaFreeHost(pinned));
  std::free(pageable);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage_error("missing subcommand");
  const std::string cmd = argv[1];
  Options o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) usage_error("bad argument: " + a);
    std::string key = a.substr(2), val = argv[++i];
    if (std::find_if(std::begin(kKnownOptions), std::end(kKnownOptions),
                     [&](const char* k) { return key == k; }) == std::end(kKnownOptions))
      usage_error("unknown option " + a);
    o.kv[key] = val;
  }

  static const char* known[] = {"probe", "sync_rtt", "launch_async", "launch_sync", "bandwidth",
                                "all"};
  if (std::find_if(std::begin(known), std::end(known),
                   [&](const char* k) { return cmd == k; }) == std::end(known))
    usage_error("unknown subcommand: " + cmd);

  const Config cfg = parse_config(o);

  if (cmd == "probe") {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      std::fprintf(stderr, "tally_microbench: no GPU visible (%s)\n",
                   e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
      return 77;
    }
    std::fprintf(stderr, "tally_microbench: %d CUDA device(s) visible\n", count);
    return 0;
  }

  CK(cudaSetDevice(cfg.device));
  CK(cudaFree(nullptr));  // create the context outside any timed region
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  const bool all = cmd == "all";
  if (all || cmd == "sync_rtt") bench_sync_rtt(cfg);
  if (all || cmd == "launch_async") bench_launch_async(cfg, stream);
  if (all || cmd == "launch_sync") bench_launch_sync(cfg, stream);
  if (all || cmd == "bandwidth") bench_bandwidth(cfg);

  CK(cudaStreamDestroy(stream));
  return 0;
}
