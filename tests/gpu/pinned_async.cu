// 8. Pinned host memory (cudaMallocHost / cudaHostAlloc / cudaFreeHost) with
//    cudaMemcpyAsync both ways on a stream, cudaMemsetAsync (also of pinned memory), chunked
//    double-buffered pipelining; results checked after cudaStreamSynchronize.
#include <vector>

#include "gpu_test_common.h"

__global__ void mix(const unsigned int* in, unsigned int* out, size_t n, unsigned int salt) {
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (in[i] ^ salt) * 2654435761u + static_cast<unsigned int>(i);
}

static unsigned int mix_host(unsigned int v, size_t i, unsigned int salt) {
  return (v ^ salt) * 2654435761u + static_cast<unsigned int>(i);
}

int main() {
  const size_t n = (16u << 20) / 4 + 37;  // ~16 MiB of uint32
  const size_t bytes = n * 4;
  unsigned int *h_in, *h_out, *h_set;
  CHECK(cudaMallocHost(&h_in, bytes));
  CHECK(cudaHostAlloc(&h_out, bytes, cudaHostAllocDefault));
  CHECK(cudaHostAlloc(&h_set, bytes, cudaHostAllocPortable));
  unsigned int flags_out = 0, flags_set = 0;
  CHECK(cudaHostGetFlags(&flags_out, h_out));
  CHECK(cudaHostGetFlags(&flags_set, h_set));
  std::printf("cudaHostGetFlags: default=%u portable-bit=%u\n", flags_out & cudaHostAllocPortable,
              flags_set & cudaHostAllocPortable);
  expect((flags_set & cudaHostAllocPortable) != 0, "portable flag reported");

  Rng rng(8);
  for (size_t i = 0; i < n; ++i) h_in[i] = rng.u32();
  std::memset(h_out, 0, bytes);
  std::memset(h_set, 0, bytes);

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned int *d_in, *d_out, *d_set, *d_copy;
  CHECK(cudaMalloc(&d_in, bytes));
  CHECK(cudaMalloc(&d_out, bytes));
  CHECK(cudaMalloc(&d_set, bytes));
  CHECK(cudaMalloc(&d_copy, bytes));

  // H2D -> kernel -> memset -> D2D -> D2H, all async on one stream.
  CHECK(cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s));
  mix<<<static_cast<unsigned int>((n + 255) / 256), 256, 0, s>>>(d_in, d_out, n, 0xA5A5A5A5u);
  CHECK_LAUNCH();
  CHECK(cudaMemsetAsync(d_set, 0x5A, bytes, s));
  CHECK(cudaMemsetAsync(reinterpret_cast<char*>(d_set) + 1000, 0x11, 333, s));  // unaligned sub-range
  CHECK(cudaMemcpyAsync(d_copy, d_out, bytes, cudaMemcpyDeviceToDevice, s));
  CHECK(cudaMemcpyAsync(h_out, d_copy, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemcpyAsync(h_set, d_set, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));

  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (h_out[i] != mix_host(h_in[i], i, 0xA5A5A5A5u)) ++bad;
  std::printf("async pipeline: checksum=%016llx bad=%zu\n",
              static_cast<unsigned long long>(checksum_bytes(h_out, bytes)), bad);
  expect(bad == 0, "H2D+kernel+D2D+D2H on one stream");
  const unsigned char* sb = reinterpret_cast<const unsigned char*>(h_set);
  size_t bad_set = 0;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned char want = (i >= 1000 && i < 1333) ? 0x11 : 0x5A;
    if (sb[i] != want) ++bad_set;
  }
  std::printf("cudaMemsetAsync: byte[999]=%02x byte[1000]=%02x byte[1332]=%02x byte[1333]=%02x bad=%zu\n",
              sb[999], sb[1000], sb[1332], sb[1333], bad_set);
  expect(bad_set == 0, "cudaMemsetAsync full + unaligned sub-range");

  // cudaMemcpyDefault (direction inferred from unified addresses).
  std::memset(h_out, 0, bytes);
  CHECK(cudaMemcpyAsync(d_copy, h_in, bytes, cudaMemcpyDefault, s));
  CHECK(cudaMemcpyAsync(h_out, d_copy, bytes, cudaMemcpyDefault, s));
  CHECK(cudaStreamSynchronize(s));
  expect(std::memcmp(h_out, h_in, bytes) == 0, "cudaMemcpyDefault round trip (pinned)");

  // Pageable memory with cudaMemcpyAsync also works (staged by the runtime).
  std::vector<unsigned int> pageable(n), pageable_back(n, 0);
  for (size_t i = 0; i < n; ++i) pageable[i] = h_in[n - 1 - i];
  CHECK(cudaMemcpyAsync(d_in, pageable.data(), bytes, cudaMemcpyHostToDevice, s));
  mix<<<static_cast<unsigned int>((n + 255) / 256), 256, 0, s>>>(d_in, d_out, n, 7u);
  CHECK_LAUNCH();
  CHECK(cudaMemcpyAsync(pageable_back.data(), d_out, bytes, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (pageable_back[i] != mix_host(pageable[i], i, 7u)) ++bad;
  std::printf("pageable async: checksum=%016llx bad=%zu\n",
              static_cast<unsigned long long>(checksum_bytes(pageable_back.data(), bytes)), bad);
  expect(bad == 0, "cudaMemcpyAsync with pageable memory");

  // Chunked, double-buffered pipeline over two streams.
  cudaStream_t ss[2];
  CHECK(cudaStreamCreateWithFlags(&ss[0], cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&ss[1], cudaStreamNonBlocking));
  const size_t chunk = 1u << 18;  // elements
  std::memset(h_out, 0, bytes);
  int chunks = 0;
  for (size_t off = 0; off < n; off += chunk, ++chunks) {
    size_t cnt = (n - off) < chunk ? (n - off) : chunk;
    cudaStream_t st = ss[chunks & 1];
    CHECK(cudaMemcpyAsync(d_in + off, h_in + off, cnt * 4, cudaMemcpyHostToDevice, st));
    mix<<<static_cast<unsigned int>((cnt + 255) / 256), 256, 0, st>>>(d_in + off, d_out + off, cnt,
                                                                        static_cast<unsigned int>(off));
    CHECK_LAUNCH();
    CHECK(cudaMemcpyAsync(h_out + off, d_out + off, cnt * 4, cudaMemcpyDeviceToHost, st));
  }
  CHECK(cudaStreamSynchronize(ss[0]));
  CHECK(cudaStreamSynchronize(ss[1]));
  bad = 0;
  for (size_t off = 0; off < n; off += chunk) {
    size_t cnt = (n - off) < chunk ? (n - off) : chunk;
    for (size_t k = 0; k < cnt; ++k)
      if (h_out[off + k] != mix_host(h_in[off + k], k, static_cast<unsigned int>(off))) ++bad;
  }
  std::printf("chunked pipeline: chunks=%d checksum=%016llx bad=%zu\n", chunks,
              static_cast<unsigned long long>(checksum_bytes(h_out, bytes)), bad);
  expect(bad == 0, "chunked two-stream pipeline");

  // Small async copies at odd offsets/sizes.
  unsigned char* hb;
  CHECK(cudaMallocHost(&hb, 4096));
  for (int i = 0; i < 4096; ++i) hb[i] = static_cast<unsigned char>(i * 31 + 7);
  unsigned char* db;
  CHECK(cudaMalloc(&db, 4096));
  CHECK(cudaMemsetAsync(db, 0, 4096, s));
  CHECK(cudaMemcpyAsync(db + 3, hb + 5, 1, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(db + 17, hb + 100, 999, cudaMemcpyHostToDevice, s));
  unsigned char* hb2;
  CHECK(cudaMallocHost(&hb2, 4096));
  CHECK(cudaMemcpyAsync(hb2, db, 4096, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bool ok = hb2[3] == hb[5] && std::memcmp(hb2 + 17, hb + 100, 999) == 0 && hb2[0] == 0 &&
            hb2[16] == 0 && hb2[1016] == 0;
  std::printf("odd copies: checksum=%016llx\n", static_cast<unsigned long long>(checksum_bytes(hb2, 4096)));
  expect(ok, "odd-sized async copies");

  // A memset through a pinned pointer (unified addressing; XLA's autotuner sets words so), in
  // stream order after a copy into the same memory.
  unsigned int* words;
  CHECK(cudaHostAlloc(&words, 4096, cudaHostAllocMapped));
  std::memset(words, 0, 4096);
  CHECK(cudaMemsetAsync(db, 0x22, 4096, s));
  CHECK(cudaMemcpyAsync(words, db, 64, cudaMemcpyDeviceToHost, s));
  CHECK(cudaMemsetAsync(words + 2, 0x7f, 8, s));
  CHECK(cudaStreamSynchronize(s));
  bool setOk = words[0] == 0x22222222u && words[1] == 0x22222222u && words[2] == 0x7f7f7f7fu &&
               words[3] == 0x7f7f7f7fu && words[4] == 0x22222222u && words[16] == 0;
  std::printf("memset of pinned memory: %08x %08x %08x %08x %08x %08x\n", words[1], words[2], words[3], words[4],
              words[15], words[16]);
  expect(setOk, "cudaMemsetAsync through a pinned pointer, in stream order");
  // ...and read back as if it were device memory (XLA's cuMemcpyDtoH of its pinned flags).
  unsigned int readBack[2] = {0, 0};
  CHECK(cudaMemcpyAsync(readBack, words + 2, 8, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  std::printf("pinned memory read as device memory: %08x %08x\n", readBack[0], readBack[1]);
  expect(readBack[0] == 0x7f7f7f7fu && readBack[1] == 0x7f7f7f7fu, "cudaMemcpyDeviceToHost from a pinned pointer");
  CHECK(cudaFreeHost(words));

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(ss[0]));
  CHECK(cudaStreamDestroy(ss[1]));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_set));
  CHECK(cudaFree(d_copy));
  CHECK(cudaFree(db));
  CHECK(cudaFreeHost(h_in));
  CHECK(cudaFreeHost(h_out));
  CHECK(cudaFreeHost(h_set));
  CHECK(cudaFreeHost(hb));
  CHECK(cudaFreeHost(hb2));
  return finish("pinned_async");
}
