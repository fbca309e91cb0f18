// 16. Large transfers: 64 MiB and 256 MiB H2D/D2H with pageable and pinned
//     host memory (checksummed on host and on device), cudaMemset, D2D
//     cudaMemcpy, and legacy default-stream semantics: a blocking stream
//     (cudaStreamCreate) observes prior legacy-stream work without explicit
//     synchronisation, and vice versa.
#include <memory>
#include <vector>

#include "gpu_test_common.h"

// Order-independent device checksum: sum of w[i] * ((i % 1021) + 1) mod 2^64.
__global__ void dev_checksum(const unsigned int* w, size_t n, unsigned long long* out) {
  unsigned long long acc = 0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    acc += static_cast<unsigned long long>(w[i]) * ((i % 1021) + 1);
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}

static unsigned long long host_weighted(const unsigned int* w, size_t n) {
  unsigned long long acc = 0;
  for (size_t i = 0; i < n; ++i) acc += static_cast<unsigned long long>(w[i]) * ((i % 1021) + 1);
  return acc;
}

static void fill(unsigned int* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
  for (size_t i = 0; i < n; ++i) {  // xorshift64: fast enough for 256 MiB
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<unsigned int>(x >> 16);
  }
}

static unsigned long long device_sum(const unsigned int* d, size_t n, unsigned long long* d_acc) {
  CHECK(cudaMemset(d_acc, 0, sizeof(unsigned long long)));
  dev_checksum<<<1024, 256>>>(d, n, d_acc);
  CHECK_LAUNCH();
  unsigned long long v = 0;
  CHECK(cudaMemcpy(&v, d_acc, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

__global__ void slow_mark(int* buf, int n, int value, unsigned long long ns) {
  if (threadIdx.x == 0) gpu_spin_ns(ns);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = value + i;
}

__global__ void copy_plus(const int* in, int* out, int n, int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + add;
}

int main() {
  unsigned long long* d_acc;
  CHECK(cudaMalloc(&d_acc, sizeof(unsigned long long)));
  const size_t sizes_mib[] = {64, 256};
  int case_no = 0;
  for (size_t mib : sizes_mib) {
    const size_t bytes = mib << 20;
    const size_t n = bytes / 4;
    unsigned int *d1, *d2;
    CHECK(cudaMalloc(&d1, bytes));
    CHECK(cudaMalloc(&d2, bytes));
    for (int pinned = 0; pinned < 2; ++pinned) {
      ++case_no;
      const char* kind = pinned ? "pinned" : "pageable";
      unsigned int *src, *dst;
      std::unique_ptr<unsigned int[]> src_own, dst_own;
      if (pinned) {
        CHECK(cudaMallocHost(&src, bytes));
        CHECK(cudaHostAlloc(&dst, bytes, cudaHostAllocDefault));
      } else {
        src_own.reset(new unsigned int[n]);
        dst_own.reset(new unsigned int[n]);
        src = src_own.get();
        dst = dst_own.get();
      }
      fill(src, n, 1600 + case_no);
      std::memset(dst, 0, bytes);
      const unsigned long long host_sum = host_weighted(src, n);
      const uint64_t host_fnv = checksum_bytes(src, bytes);

      CHECK(cudaMemcpy(d1, src, bytes, cudaMemcpyHostToDevice));
      const unsigned long long dsum = device_sum(d1, n, d_acc);
      CHECK(cudaMemcpy(dst, d1, bytes, cudaMemcpyDeviceToHost));
      const uint64_t back_fnv = checksum_bytes(dst, bytes);
      std::printf("%zu MiB %s: host_fnv=%016llx device_sum=%016llx back_fnv=%016llx\n", mib, kind,
                  static_cast<unsigned long long>(host_fnv), dsum, static_cast<unsigned long long>(back_fnv));
      char what[96];
      std::snprintf(what, sizeof what, "%zu MiB %s H2D: device checksum", mib, kind);
      expect(dsum == host_sum, what);
      std::snprintf(what, sizeof what, "%zu MiB %s D2H round trip", mib, kind);
      expect(back_fnv == host_fnv && std::memcmp(dst, src, bytes) == 0, what);

      // D2D copy of the whole buffer, then D2H of the copy.
      CHECK(cudaMemset(d2, 0, bytes));
      CHECK(cudaMemcpy(d2, d1, bytes, cudaMemcpyDeviceToDevice));
      std::memset(dst, 0, bytes);
      CHECK(cudaMemcpy(dst, d2, bytes, cudaMemcpyDeviceToHost));
      std::snprintf(what, sizeof what, "%zu MiB %s D2D copy", mib, kind);
      expect(checksum_bytes(dst, bytes) == host_fnv, what);

      // cudaMemset of everything but a 1 MiB + 3 byte head.
      const size_t head = (1u << 20) + 3;
      CHECK(cudaMemset(reinterpret_cast<char*>(d2) + head, 0xAB, bytes - head));
      CHECK(cudaMemcpy(dst, d2, bytes, cudaMemcpyDeviceToHost));
      const unsigned char* db = reinterpret_cast<const unsigned char*>(dst);
      size_t bad = 0;
      for (size_t i = head; i < bytes; ++i)
        if (db[i] != 0xAB) ++bad;
      bool head_ok = std::memcmp(dst, src, head) == 0;
      std::snprintf(what, sizeof what, "%zu MiB %s cudaMemset (0xAB, head kept)", mib, kind);
      expect(bad == 0 && head_ok, what);

      if (pinned) {
        CHECK(cudaFreeHost(src));
        CHECK(cudaFreeHost(dst));
      }
    }
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
  }

  // ---- legacy default stream semantics ----
  const int n = 1 << 20;
  int *a, *b, *c;
  CHECK(cudaMalloc(&a, sizeof(int) * n));
  CHECK(cudaMalloc(&b, sizeof(int) * n));
  CHECK(cudaMalloc(&c, sizeof(int) * n));
  CHECK(cudaMemset(a, 0, sizeof(int) * n));
  CHECK(cudaMemset(b, 0, sizeof(int) * n));
  CHECK(cudaDeviceSynchronize());
  cudaStream_t blocking;
  CHECK(cudaStreamCreate(&blocking));
  // Legacy stream: 200 ms, then writes a. The blocking stream's kernel must
  // wait for it (implicit synchronisation), without any event or sync.
  slow_mark<<<1, 1024>>>(a, n, 1000, 200ull * 1000 * 1000);
  CHECK_LAUNCH();
  copy_plus<<<(n + 255) / 256, 256, 0, blocking>>>(a, b, n, 5);
  CHECK_LAUNCH();
  std::vector<int> hb(n);
  CHECK(cudaMemcpyAsync(hb.data(), b, sizeof(int) * n, cudaMemcpyDeviceToHost, blocking));
  CHECK(cudaStreamSynchronize(blocking));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (hb[i] != 1000 + i + 5) ++bad;
  std::printf("blocking stream after legacy stream: bad=%d\n", bad);
  expect(bad == 0, "blocking stream observes legacy default stream work");

  // Reverse: slow work on the blocking stream, then a legacy-stream kernel
  // and a plain cudaMemcpy (legacy stream) must observe it.
  slow_mark<<<1, 1024, 0, blocking>>>(a, n, 7000, 200ull * 1000 * 1000);
  CHECK_LAUNCH();
  copy_plus<<<(n + 255) / 256, 256>>>(a, c, n, -1);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(hb.data(), c, sizeof(int) * n, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < n; ++i)
    if (hb[i] != 7000 + i - 1) ++bad;
  std::printf("legacy stream after blocking stream: bad=%d\n", bad);
  expect(bad == 0, "legacy default stream observes blocking stream work");

  CHECK(cudaStreamDestroy(blocking));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
  CHECK(cudaFree(d_acc));
  return finish("large_transfers");
}
