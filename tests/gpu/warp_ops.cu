// 17. Grid-stride loop kernel, warp shuffles (down/xor/up/idx) and votes
//     (ballot/any/all), __match_any_sync and __reduce_add_sync.
#include <vector>

#include "gpu_test_common.h"

__global__ void grid_stride(const int* in, long long* out, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<long long>(in[i]) * in[i] - static_cast<long long>(i);
}

// One output record per warp.
struct WarpOut {
  int sum_down;        // lane 0: reduction with __shfl_down_sync
  int sum_xor;         // every lane gets the same butterfly sum; lane 31 stores it
  int bcast;           // value of lane 7 broadcast with __shfl_sync
  unsigned int ballot; // lanes with positive values
  int any_neg;
  int all_small;
  unsigned int match_mask_lane0;  // lanes whose (v & 3) equals lane 0's
  unsigned int reduce_add;        // __reduce_add_sync of (v & 0xff)
};

__global__ void warp_kernel(const int* in, int* scan, WarpOut* out) {
  const unsigned int full = 0xffffffffu;
  int gid = blockIdx.x * blockDim.x + threadIdx.x;
  int lane = threadIdx.x & 31;
  int warp = gid >> 5;
  int v = in[gid];

  int s = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(full, s, o);
  int x = v;
  for (int o = 1; o < 32; o <<= 1) x += __shfl_xor_sync(full, x, o);
  int b = __shfl_sync(full, v, 7);
  // inclusive scan with __shfl_up_sync
  int sc = v;
  for (int o = 1; o < 32; o <<= 1) {
    int t = __shfl_up_sync(full, sc, o);
    if (lane >= o) sc += t;
  }
  scan[gid] = sc;
  unsigned int bal = __ballot_sync(full, v > 0);
  int anyn = __any_sync(full, v < 0);
  int alls = __all_sync(full, v < 1000 && v > -1000);
  unsigned int mm = __match_any_sync(full, v & 3);
  unsigned int ra = __reduce_add_sync(full, static_cast<unsigned int>(v & 0xff));
  if (lane == 0) {
    out[warp].sum_down = s;
    out[warp].bcast = b;
    out[warp].ballot = bal;
    out[warp].any_neg = anyn;
    out[warp].all_small = alls;
    out[warp].match_mask_lane0 = mm;
    out[warp].reduce_add = ra;
  }
  if (lane == 31) out[warp].sum_xor = x;
}

int main() {
  // grid-stride
  const size_t n = (1u << 22) + 999;
  Rng rng(17);
  std::vector<int> h(n);
  for (auto& v : h) v = rng.range(-40000, 40000);
  int* din;
  long long* dout;
  CHECK(cudaMalloc(&din, sizeof(int) * n));
  CHECK(cudaMalloc(&dout, sizeof(long long) * n));
  CHECK(cudaMemcpy(din, h.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  grid_stride<<<7, 128>>>(din, dout, n);  // far fewer threads than elements
  CHECK_LAUNCH();
  std::vector<long long> out(n);
  CHECK(cudaMemcpy(out.data(), dout, sizeof(long long) * n, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i)
    if (out[i] != static_cast<long long>(h[i]) * h[i] - static_cast<long long>(i)) ++bad;
  std::printf("grid-stride: checksum=%016llx bad=%zu\n",
              static_cast<unsigned long long>(checksum_bytes(out.data(), sizeof(long long) * n)), bad);
  expect(bad == 0, "grid-stride loop over 4M elements with 896 threads");

  // warp ops: 64 warps; some warps all-small, some with big values.
  const int threads = 64 * 32;
  std::vector<int> w(threads);
  for (int i = 0; i < threads; ++i) {
    int warp = i / 32;
    w[i] = (warp % 3 == 0) ? rng.range(-999, 999) : rng.range(-5000, 5000);
    if (warp % 5 == 1) w[i] = rng.range(1, 999);  // all positive warps
  }
  int *dw, *dscan;
  WarpOut* dwo;
  CHECK(cudaMalloc(&dw, sizeof(int) * threads));
  CHECK(cudaMalloc(&dscan, sizeof(int) * threads));
  CHECK(cudaMalloc(&dwo, sizeof(WarpOut) * (threads / 32)));
  CHECK(cudaMemcpy(dw, w.data(), sizeof(int) * threads, cudaMemcpyHostToDevice));
  warp_kernel<<<threads / 128, 128>>>(dw, dscan, dwo);
  CHECK_LAUNCH();
  std::vector<int> scan(threads);
  std::vector<WarpOut> wo(threads / 32);
  CHECK(cudaMemcpy(scan.data(), dscan, sizeof(int) * threads, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(wo.data(), dwo, sizeof(WarpOut) * (threads / 32), cudaMemcpyDeviceToHost));
  int bad_w = 0, bad_scan = 0;
  for (int warp = 0; warp < threads / 32; ++warp) {
    const int* v = &w[warp * 32];
    int sum = 0, run = 0;
    unsigned int bal = 0, mm = 0, ra = 0;
    int anyn = 0, alls = 1;
    for (int l = 0; l < 32; ++l) {
      sum += v[l];
      run += v[l];
      if (scan[warp * 32 + l] != run) ++bad_scan;
      if (v[l] > 0) bal |= 1u << l;
      if (v[l] < 0) anyn = 1;
      if (!(v[l] < 1000 && v[l] > -1000)) alls = 0;
      if ((v[l] & 3) == (v[0] & 3)) mm |= 1u << l;
      ra += static_cast<unsigned int>(v[l] & 0xff);
    }
    const WarpOut& o = wo[warp];
    if (o.sum_down != sum || o.sum_xor != sum || o.bcast != v[7] || o.ballot != bal ||
        (o.any_neg != 0) != (anyn != 0) || (o.all_small != 0) != (alls != 0) ||
        o.match_mask_lane0 != mm || o.reduce_add != ra)
      ++bad_w;
  }
  int all_small_warps = 0, any_neg_warps = 0;
  for (auto& o : wo) {
    all_small_warps += o.all_small != 0;
    any_neg_warps += o.any_neg != 0;
  }
  std::printf("warp ops: records_checksum=%016llx scan_checksum=%016llx all_small_warps=%d any_neg_warps=%d\n",
              static_cast<unsigned long long>(checksum_bytes(wo.data(), sizeof(WarpOut) * wo.size())),
              static_cast<unsigned long long>(checksum_bytes(scan.data(), sizeof(int) * threads)),
              all_small_warps, any_neg_warps);
  expect(bad_w == 0, "shuffles, votes, match, reduce per warp");
  expect(bad_scan == 0, "__shfl_up_sync inclusive scan");

  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dw));
  CHECK(cudaFree(dscan));
  CHECK(cudaFree(dwo));
  return finish("warp_ops");
}
