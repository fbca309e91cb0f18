// Copies of every size class between host and device, checked byte for byte, with no kernel
// (so the fake GPU of the CPU integration tests can run it too): sizes around the 16 KiB up to
// which a Unix-socket client's pageable device-to-host copies use its landing areas
// (client/runtime/landing_areas.h) and the 1 MiB at which TCP/TLS clients move bytes on their
// bulk lanes (client/transport/bulk_lanes.h), a copy
// longer than one 32 MiB piece is left to large_transfers, pageable and pinned host memory,
// synchronous and asynchronous, and two threads copying at once (each copy's bytes must not mix
// with the other's on the lanes).
#include <thread>
#include <vector>

#include "gpu_test_common.h"

namespace {

constexpr size_t kDeviceBytes = 12u << 20;  // the fake GPU has 32 MiB

void fill(unsigned char* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = static_cast<unsigned char>(x >> 24);
  }
}

uint64_t digest(const unsigned char* p, size_t n, uint64_t h) {
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;  // FNV-1a
  return h;
}

// Host -> device -> (device -> device) -> host; `pinned`: cudaMallocHost buffers.
bool roundTrip(unsigned char* dev, unsigned char* dev2, size_t n, bool pinned, bool async, uint64_t seed,
               cudaStream_t stream, uint64_t& h) {
  unsigned char* src = nullptr;
  unsigned char* dst = nullptr;
  std::vector<unsigned char> pageableSrc, pageableDst;
  if (pinned) {
    CHECK(cudaMallocHost(&src, n));
    CHECK(cudaMallocHost(&dst, n));
  } else {
    pageableSrc.resize(n);
    pageableDst.resize(n);
    src = pageableSrc.data();
    dst = pageableDst.data();
  }
  fill(src, n, seed);
  std::memset(dst, 0xA5, n);
  if (async) {
    CHECK(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemcpyAsync(dev2, dev, n, cudaMemcpyDeviceToDevice, stream));
    CHECK(cudaMemcpyAsync(dst, dev2, n, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
  } else {
    CHECK(cudaMemcpy(dev, src, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dev2, dev, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(dst, dev2, n, cudaMemcpyDeviceToHost));
  }
  bool same = std::memcmp(src, dst, n) == 0;
  if (!same) {
    size_t at = 0;
    while (at < n && src[at] == dst[at]) ++at;
    std::printf("MISMATCH %zu bytes (%s, %s): first differing byte at %zu\n", n, pinned ? "pinned" : "pageable",
                async ? "async" : "sync", at);
  }
  h = digest(dst, n, h);
  if (pinned) {
    CHECK(cudaFreeHost(src));
    CHECK(cudaFreeHost(dst));
  }
  return same;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  unsigned char* dev = nullptr;
  unsigned char* dev2 = nullptr;
  CHECK(cudaMalloc(&dev, kDeviceBytes));
  CHECK(cudaMalloc(&dev2, kDeviceBytes));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  const size_t sizes[] = {1,       4096,    16u << 10,         (16u << 10) + 1, (1u << 20) - 1,
                          1u << 20, (1u << 20) + 4097, (5u << 20) + 3, kDeviceBytes};
  uint64_t h = 0xcbf29ce484222325ull;
  int checks = 0, bad = 0;
  uint64_t seed = 1;
  for (size_t n : sizes) {
    for (int pinned = 0; pinned < 2; ++pinned) {
      for (int async = 0; async < 2; ++async) {
        ++checks;
        if (!roundTrip(dev, dev2, n, pinned != 0, async != 0, seed++, stream, h)) ++bad;
      }
    }
  }
  std::printf("sizes: %d round trips, %d mismatched, digest %016llx\n", checks, bad, static_cast<unsigned long long>(h));

  // Two threads at once, each on its own half of both buffers.
  const size_t half = kDeviceBytes / 2;
  int threadBad[2] = {0, 0};
  uint64_t threadDigest[2] = {0, 0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s;
      CHECK(cudaStreamCreate(&s));
      uint64_t hh = 0xcbf29ce484222325ull;
      for (int i = 0; i < 6; ++i) {
        if (!roundTrip(dev + t * half, dev2 + t * half, half - static_cast<size_t>(i) * 4099, (i & 1) != 0,
                       (i & 2) != 0, 1000 + static_cast<uint64_t>(t) * 100 + i, s, hh)) {
          ++threadBad[t];
        }
      }
      threadDigest[t] = hh;
      CHECK(cudaStreamDestroy(s));
    });
  }
  for (auto& th : threads) th.join();
  std::printf("threads: %d and %d mismatched, digests %016llx %016llx\n", threadBad[0], threadBad[1],
              static_cast<unsigned long long>(threadDigest[0]), static_cast<unsigned long long>(threadDigest[1]));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(dev));
  CHECK(cudaFree(dev2));
  bool ok = bad == 0 && threadBad[0] == 0 && threadBad[1] == 0;
  std::printf("%s: bulk copies\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
