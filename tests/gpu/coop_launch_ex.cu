// 14. cudaLaunchCooperativeKernel with cooperative_groups grid.sync() (grid
//     sized from occupancy x SM count), and cudaLaunchKernelExC with launch
//     attributes (priority, cooperative).
#include <cooperative_groups.h>

#include <vector>

#include "gpu_test_common.h"

namespace cg = cooperative_groups;

constexpr int kThreads = 256;

// Phase 1: every block sums a grid-stride slice into partial[block].
// grid.sync()
// Phase 2: block 0 sums the partials into *total.
// grid.sync()
// Phase 3: every block reads *total (only valid after the second sync).
__global__ void coop_sum(const int* in, int n, long long* partial, long long* total, long long* seen) {
  cg::grid_group grid = cg::this_grid();
  __shared__ long long s[kThreads];
  long long v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (int st = kThreads / 2; st > 0; st >>= 1) {
    if (threadIdx.x < st) s[threadIdx.x] += s[threadIdx.x + st];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
  grid.sync();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    long long t = 0;
    for (unsigned int b = 0; b < gridDim.x; ++b) t += partial[b];
    *total = t;
  }
  grid.sync();
  if (threadIdx.x == 0) seen[blockIdx.x] = *total;
}

__global__ void scale(const int* in, int* out, int n, int mul) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * mul;
}

int main() {
  int coop = 0, sms = 0;
  CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int per_sm = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_sum, kThreads, 0));
  const int grid = per_sm * sms;
  std::printf("cooperativeLaunch=%d SMs=%d blocksPerSM=%d grid=%d\n", coop, sms, per_sm, grid);
  expect(coop == 1 && grid > 0, "cooperative launch supported");

  const int n = 5000011;
  Rng rng(14);
  std::vector<int> h(n);
  long long want = 0;
  for (auto& v : h) {
    v = rng.range(-50000, 50000);
    want += v;
  }
  int* d_in;
  long long *d_partial, *d_total, *d_seen;
  CHECK(cudaMalloc(&d_in, sizeof(int) * n));
  CHECK(cudaMalloc(&d_partial, sizeof(long long) * (grid + 1)));
  CHECK(cudaMalloc(&d_total, sizeof(long long)));
  CHECK(cudaMalloc(&d_seen, sizeof(long long) * (grid + 1)));
  CHECK(cudaMemcpy(d_in, h.data(), sizeof(int) * n, cudaMemcpyHostToDevice));

  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int nn = n;
  void* args[] = {&d_in, &nn, &d_partial, &d_total, &d_seen};

  auto check_result = [&](const char* label, int g) {
    long long total = 0;
    std::vector<long long> seen(g);
    CHECK(cudaMemcpy(&total, d_total, sizeof total, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(seen.data(), d_seen, sizeof(long long) * g, cudaMemcpyDeviceToHost));
    int bad_seen = 0;
    for (auto v : seen)
      if (v != want) ++bad_seen;
    std::printf("%s: total=%lld (host %lld) blocks_seeing_total_wrong=%d\n", label, total, want, bad_seen);
    return total == want && bad_seen == 0;
  };

  // Memsets on s: cudaMemset of device memory may return before it is done, and the legacy
  // stream does not order a non-blocking stream (a tallyd soak caught the race).
  CHECK(cudaMemsetAsync(d_seen, 0, sizeof(long long) * grid, s));
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop_sum), dim3(grid), dim3(kThreads),
                                    args, 0, s));
  CHECK(cudaStreamSynchronize(s));
  expect(check_result("cudaLaunchCooperativeKernel", grid), "grid.sync() cooperative sum");

  // One block more than can be co-resident must be rejected.
  cudaError_t e = cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(coop_sum), dim3(grid + 1),
                                              dim3(kThreads), args, 0, s);
  (void)cudaGetLastError();
  std::printf("cudaLaunchCooperativeKernel(grid+1) -> %s\n", cudaGetErrorName(e));
  expect(e == cudaErrorCooperativeLaunchTooLarge, "oversized cooperative grid rejected");

  // cudaLaunchKernelExC with a priority attribute.
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int m = 300007;
  int* d_out;
  CHECK(cudaMalloc(&d_out, sizeof(int) * m));
  {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributePriority;
    attr[0].val.priority = greatest;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((m + 255) / 256);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int mm = m, mul = -3;
    void* sargs[] = {&d_in, &d_out, &mm, &mul};
    CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(scale), sargs));
    CHECK(cudaStreamSynchronize(s));
    std::vector<int> out(m);
    CHECK(cudaMemcpy(out.data(), d_out, sizeof(int) * m, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < m; ++i)
      if (out[i] != h[i] * -3) ++bad;
    std::printf("cudaLaunchKernelExC(priority=%d): checksum=%016llx bad=%d\n", greatest,
                static_cast<unsigned long long>(checksum_bytes(out.data(), sizeof(int) * m)), bad);
    expect(bad == 0, "cudaLaunchKernelExC with priority attribute");

    // The C++ template wrapper (cudaLaunchKernelEx) with typed arguments.
    attr[0].val.priority = least;
    CHECK(cudaLaunchKernelEx(&cfg, scale, static_cast<const int*>(d_in), d_out, m, 7));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(out.data(), d_out, sizeof(int) * m, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < m; ++i)
      if (out[i] != h[i] * 7) ++bad;
    expect(bad == 0, "cudaLaunchKernelEx<> with priority attribute");
  }

  // cudaLaunchKernelExC with the cooperative attribute runs grid.sync() too.
  {
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    attr[1].id = cudaLaunchAttributePriority;
    attr[1].val.priority = greatest;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 2;
    CHECK(cudaMemsetAsync(d_seen, 0, sizeof(long long) * grid, s));
    CHECK(cudaMemsetAsync(d_total, 0, sizeof(long long), s));
    CHECK(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(coop_sum), args));
    CHECK(cudaStreamSynchronize(s));
    expect(check_result("cudaLaunchKernelExC(cooperative)", grid), "cooperative attribute via ExC");
  }

  // Thread-block clusters: how many 2-block clusters of `scale` fit at once, and the largest
  // cluster it could use (sm_90), through the runtime and the driver.
  {
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 2;
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(64);
    cfg.blockDim = dim3(kThreads);
    cfg.attrs = cluster;
    cfg.numAttrs = 1;
    int clusters = 0, largest = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, scale, &cfg));
    cfg.numAttrs = 0;
    CHECK(cudaOccupancyMaxPotentialClusterSize(&largest, scale, &cfg));
    cudaFunction_t fn = nullptr;
    CHECK(cudaGetFuncBySymbol(&fn, reinterpret_cast<const void*>(scale)));
    CUlaunchAttribute driverCluster{};
    driverCluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    driverCluster.value.clusterDim.x = 2;
    driverCluster.value.clusterDim.y = 1;
    driverCluster.value.clusterDim.z = 1;
    CUlaunchConfig driverCfg{};
    driverCfg.gridDimX = 64;
    driverCfg.gridDimY = driverCfg.gridDimZ = 1;
    driverCfg.blockDimX = kThreads;
    driverCfg.blockDimY = driverCfg.blockDimZ = 1;
    driverCfg.attrs = &driverCluster;
    driverCfg.numAttrs = 1;
    int driverClusters = 0;
    CU_CHECK(cuOccupancyMaxActiveClusters(&driverClusters, reinterpret_cast<CUfunction>(fn), &driverCfg));
    std::printf("clusters of 2 active at once %d (driver %d), largest cluster %d\n", clusters, driverClusters, largest);
    expect(clusters > 0 && clusters == driverClusters && largest >= 2, "cluster occupancy");
  }

  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d_in));
  CHECK(cudaFree(d_partial));
  CHECK(cudaFree(d_total));
  CHECK(cudaFree(d_seen));
  CHECK(cudaFree(d_out));
  return finish("coop_launch_ex");
}
