// Shared helpers for the GPU test programs in tests/gpu/.
//
// Every program prints only deterministic text (values, checksums, error
// NAMES) so that a native run and a run through tallyd can be diffed.
// Never print pointers, timings or cudaGetErrorString() text.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// Abort the program (exit 1) when a CUDA runtime call fails.
#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t check_err_ = (call);                                                  \
    if (check_err_ != cudaSuccess) {                                                  \
      std::printf("FATAL line %d: %s -> %s\n", __LINE__, #call,                       \
                  cudaGetErrorName(check_err_));                                      \
      std::fflush(stdout);                                                            \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

static inline const char* cu_err_name(CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) return "CUDA_ERROR_<unknown>";
  return name;
}

// Abort the program (exit 1) when a CUDA driver call fails.
#define CU_CHECK(call)                                                                \
  do {                                                                                \
    CUresult cu_r_ = (call);                                                          \
    if (cu_r_ != CUDA_SUCCESS) {                                                      \
      std::printf("FATAL line %d: %s -> %s\n", __LINE__, #call, cu_err_name(cu_r_));  \
      std::fflush(stdout);                                                            \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// Check a kernel launch (configuration errors) right after <<<>>>.
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

// Expect a specific error code from a call; records a failure otherwise.
// Clears the per-thread "last error" afterwards so that later CHECK_LAUNCH()
// calls are not confused by the expected error.
#define EXPECT_ERR(call, expected)                                                    \
  do {                                                                                \
    cudaError_t expect_err_ = (call);                                                 \
    (void)cudaGetLastError();                                                         \
    std::printf("%s -> %s\n", #call, cudaGetErrorName(expect_err_));                  \
    if (expect_err_ != (expected)) {                                                  \
      std::printf("  MISMATCH: expected %s\n", cudaGetErrorName(expected));           \
      ++g_failures;                                                                   \
    }                                                                                 \
  } while (0)

static int g_failures = 0;

// A driver function resolved as PyTorch resolves them: through the runtime, without linking
// libcuda. Exits (1) when it is not found.
template <typename Fn>
static Fn driver_fn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status));
  if (status != cudaDriverEntryPointSuccess || fn == nullptr) {
    std::printf("FATAL: %s not found\n", name);
    std::exit(1);
  }
  return reinterpret_cast<Fn>(fn);
}

// Record and print a named boolean check.
static inline bool expect(bool ok, const char* what) {
  std::printf("check %-52s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) ++g_failures;
  return ok;
}

// Print the final verdict and return the process exit code.
static inline int finish(const char* prog) {
  if (g_failures == 0) {
    std::printf("RESULT %s: PASS\n", prog);
  } else {
    std::printf("RESULT %s: FAIL (%d checks failed)\n", prog, g_failures);
  }
  std::fflush(stdout);
  return g_failures == 0 ? 0 : 1;
}

// Deterministic seeded generator (splitmix64).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x1234567ull) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
  // Integer in [lo, hi].
  int range(int lo, int hi) { return lo + static_cast<int>(u32() % static_cast<uint32_t>(hi - lo + 1)); }
  // Float in [-1, 1), exactly representable (multiple of 2^-20).
  float unit() { return static_cast<float>(static_cast<int>(u32() >> 11) - (1 << 20)) / (1 << 20); }
};

// Order-sensitive 64-bit checksum over a byte range (FNV-1a over 8-byte words).
static inline uint64_t checksum_bytes(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

#ifdef __CUDACC__
// Nanosecond GPU clock (same rate on every GPU, unlike clock64()).
__device__ __forceinline__ unsigned long long gpu_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Busy-wait on the GPU for about `ns` nanoseconds.
__device__ __forceinline__ void gpu_spin_ns(unsigned long long ns) {
  unsigned long long start = gpu_globaltimer();
  while (gpu_globaltimer() - start < ns) {
  }
}
#endif

static inline const char* memory_type_name(cudaMemoryType t) {
  switch (t) {
    case cudaMemoryTypeUnregistered: return "cudaMemoryTypeUnregistered";
    case cudaMemoryTypeHost: return "cudaMemoryTypeHost";
    case cudaMemoryTypeDevice: return "cudaMemoryTypeDevice";
    case cudaMemoryTypeManaged: return "cudaMemoryTypeManaged";
  }
  return "unknown";
}
