// 2. Block reduction in static __shared__ memory + atomics on global memory.
#include <climits>
#include <vector>

#include "gpu_test_common.h"

constexpr int kBlock = 256;
constexpr int kBins = 64;

// Each block reduces kBlock*2 elements in shared memory, writes its partial sum
// and also atomically accumulates it into a global 64-bit total.
__global__ void block_sum(const int* in, int n, long long* partials, unsigned long long* total) {
  __shared__ long long s[kBlock];
  int tid = threadIdx.x;
  int i = blockIdx.x * kBlock * 2 + tid;
  long long v = 0;
  if (i < n) v += in[i];
  if (i + kBlock < n) v += in[i + kBlock];
  s[tid] = v;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) {
    partials[blockIdx.x] = s[0];
    atomicAdd(total, static_cast<unsigned long long>(s[0]));  // two's complement wraps fine
  }
}

// Histogram with a shared-memory privatised copy, merged with global atomics,
// plus global atomicMax/atomicMin/atomicAdd(int) and an atomicCAS counter.
__global__ void histo_minmax(const int* in, int n, unsigned int* bins, int* gmax, int* gmin,
                             int* count_even, unsigned int* cas_counter) {
  __shared__ unsigned int sbins[kBins];
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) sbins[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int v = in[i];
    atomicAdd(&sbins[static_cast<unsigned int>(v) % kBins], 1u);
    atomicMax(gmax, v);
    atomicMin(gmin, v);
    if ((v & 1) == 0) atomicAdd(count_even, 1);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kBins; b += blockDim.x) atomicAdd(&bins[b], sbins[b]);
  if (threadIdx.x == 0) {
    // increment via a CAS loop
    unsigned int old = *cas_counter, assumed;
    do {
      assumed = old;
      old = atomicCAS(cas_counter, assumed, assumed + 1);
    } while (old != assumed);
  }
}

int main() {
  const int n = (1 << 22) + 4321;
  Rng rng(2024);
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = rng.range(-1000000, 1000000);

  int* din;
  long long* dpart;
  unsigned long long* dtotal;
  const int blocks = (n + kBlock * 2 - 1) / (kBlock * 2);
  CHECK(cudaMalloc(&din, sizeof(int) * n));
  CHECK(cudaMalloc(&dpart, sizeof(long long) * blocks));
  CHECK(cudaMalloc(&dtotal, sizeof(unsigned long long)));
  CHECK(cudaMemcpy(din, h.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dtotal, 0, sizeof(unsigned long long)));
  block_sum<<<blocks, kBlock>>>(din, n, dpart, dtotal);
  CHECK_LAUNCH();
  std::vector<long long> part(blocks);
  unsigned long long total_u = 0;
  CHECK(cudaMemcpy(part.data(), dpart, sizeof(long long) * blocks, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&total_u, dtotal, sizeof total_u, cudaMemcpyDeviceToHost));
  long long total = static_cast<long long>(total_u);

  long long host_total = 0;
  int bad_part = 0;
  for (int b = 0; b < blocks; ++b) {
    long long s = 0;
    for (int k = 0; k < kBlock * 2; ++k) {
      long long idx = static_cast<long long>(b) * kBlock * 2 + k;
      if (idx < n) s += h[idx];
    }
    if (s != part[b]) ++bad_part;
    host_total += s;
  }
  std::printf("blocks=%d total=%lld host_total=%lld bad_partials=%d\n", blocks, total, host_total,
              bad_part);
  expect(total == host_total, "atomic total == host sum");
  expect(bad_part == 0, "all shared-memory partial sums match");

  unsigned int* dbins;
  int *dmax, *dmin, *deven;
  unsigned int* dcas;
  CHECK(cudaMalloc(&dbins, sizeof(unsigned int) * kBins));
  CHECK(cudaMalloc(&dmax, sizeof(int)));
  CHECK(cudaMalloc(&dmin, sizeof(int)));
  CHECK(cudaMalloc(&deven, sizeof(int)));
  CHECK(cudaMalloc(&dcas, sizeof(unsigned int)));
  CHECK(cudaMemset(dbins, 0, sizeof(unsigned int) * kBins));
  CHECK(cudaMemset(deven, 0, sizeof(int)));
  CHECK(cudaMemset(dcas, 0, sizeof(unsigned int)));
  int init_max = INT_MIN, init_min = INT_MAX;
  CHECK(cudaMemcpy(dmax, &init_max, sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dmin, &init_min, sizeof(int), cudaMemcpyHostToDevice));
  const int hgrid = 120;
  histo_minmax<<<hgrid, 512>>>(din, n, dbins, dmax, dmin, deven, dcas);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());

  std::vector<unsigned int> bins(kBins);
  int gmax, gmin, even;
  unsigned int cas;
  CHECK(cudaMemcpy(bins.data(), dbins, sizeof(unsigned int) * kBins, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&gmax, dmax, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&gmin, dmin, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&even, deven, sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&cas, dcas, sizeof(unsigned int), cudaMemcpyDeviceToHost));

  std::vector<unsigned int> hb(kBins, 0);
  int hmax = INT_MIN, hmin = INT_MAX, heven = 0;
  for (int v : h) {
    hb[static_cast<unsigned int>(v) % kBins]++;
    hmax = v > hmax ? v : hmax;
    hmin = v < hmin ? v : hmin;
    if ((v & 1) == 0) ++heven;
  }
  std::printf("histogram checksum=%016llx bin0=%u bin63=%u max=%d min=%d even=%d cas=%u\n",
              static_cast<unsigned long long>(checksum_bytes(bins.data(), sizeof(unsigned int) * kBins)),
              bins[0], bins[kBins - 1], gmax, gmin, even, cas);
  expect(bins == hb, "histogram matches host");
  expect(gmax == hmax && gmin == hmin, "atomicMax/atomicMin match host");
  expect(even == heven, "atomicAdd(int) even count matches host");
  expect(cas == static_cast<unsigned int>(hgrid), "atomicCAS counter == grid size");

  CHECK(cudaFree(din));
  CHECK(cudaFree(dpart));
  CHECK(cudaFree(dtotal));
  CHECK(cudaFree(dbins));
  CHECK(cudaFree(dmax));
  CHECK(cudaFree(dmin));
  CHECK(cudaFree(deven));
  CHECK(cudaFree(dcas));
  return finish("reduction_atomics");
}
