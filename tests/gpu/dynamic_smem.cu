// 4. Dynamic shared memory (extern __shared__), including > 48 KiB through
//    cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), and
//    cudaFuncGetAttributes.
#include <vector>

#include "gpu_test_common.h"

// Each block stages `per_block` floats of its chunk in dynamic shared memory
// and writes out[i] = 2*s[per_block-1-i] + s[i] (a reversal needing the whole
// chunk to be resident).
__global__ void reverse_mix(const float* in, float* out, int n, int per_block) {
  extern __shared__ float s[];
  size_t base = static_cast<size_t>(blockIdx.x) * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) {
    size_t g = base + i;
    s[i] = g < static_cast<size_t>(n) ? in[g] : 0.0f;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) {
    size_t g = base + i;
    if (g < static_cast<size_t>(n)) out[g] = 2.0f * s[per_block - 1 - i] + s[i];
  }
}

// Static + dynamic shared memory together.
__global__ void static_plus_dynamic(int* out, int dyn_ints) {
  __shared__ int st[1024];
  extern __shared__ int dyn[];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) st[i] = i * 3;
  for (int i = threadIdx.x; i < dyn_ints; i += blockDim.x) dyn[i] = i + 7;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long sum = 0;
    for (int i = 0; i < 1024; ++i) sum += st[i];
    for (int i = 0; i < dyn_ints; ++i) sum += dyn[i];
    out[blockIdx.x] = static_cast<int>(sum);
  }
}

static void print_attrs(const char* label, const void* fn) {
  cudaFuncAttributes a;
  CHECK(cudaFuncGetAttributes(&a, fn));
  std::printf("%s: maxThreadsPerBlock=%d sharedSizeBytes=%zu maxDynamicSharedSizeBytes=%d "
              "binaryVersion=%d numRegs>0=%d localSizeBytes=%zu\n",
              label, a.maxThreadsPerBlock, a.sharedSizeBytes, a.maxDynamicSharedSizeBytes,
              a.binaryVersion, a.numRegs > 0 ? 1 : 0, a.localSizeBytes);
}

static bool run_case(const float* din, float* dout, const std::vector<float>& h, size_t smem_bytes,
                     int threads) {
  const int n = static_cast<int>(h.size());
  const int per_block = static_cast<int>(smem_bytes / sizeof(float));
  const int blocks = (n + per_block - 1) / per_block;
  CHECK(cudaMemset(dout, 0, sizeof(float) * n));
  reverse_mix<<<blocks, threads, smem_bytes>>>(din, dout, n, per_block);
  CHECK_LAUNCH();
  std::vector<float> out(n);
  CHECK(cudaMemcpy(out.data(), dout, sizeof(float) * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int b = 0; b < blocks; ++b) {
    for (int i = 0; i < per_block; ++i) {
      size_t g = static_cast<size_t>(b) * per_block + i;
      if (g >= static_cast<size_t>(n)) break;
      size_t r = static_cast<size_t>(b) * per_block + (per_block - 1 - i);
      float sr = r < static_cast<size_t>(n) ? h[r] : 0.0f;
      float expect_v = 2.0f * sr + h[g];
      if (out[g] != expect_v) ++bad;
    }
  }
  std::printf("dynamic smem=%zu bytes blocks=%d threads=%d checksum=%016llx bad=%d\n", smem_bytes,
              blocks, threads,
              static_cast<unsigned long long>(checksum_bytes(out.data(), out.size() * 4)), bad);
  return bad == 0;
}

int main() {
  int optin = 0;
  CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  int per_block_default = 0;
  CHECK(cudaDeviceGetAttribute(&per_block_default, cudaDevAttrMaxSharedMemoryPerBlock, 0));
  std::printf("sharedMemPerBlock=%d sharedMemPerBlockOptin=%d\n", per_block_default, optin);

  const int n = 3 * 1000 * 1000 + 17;
  Rng rng(4);
  std::vector<float> h(n);
  for (auto& v : h) v = rng.unit() * 8.0f;
  float *din, *dout;
  CHECK(cudaMalloc(&din, sizeof(float) * n));
  CHECK(cudaMalloc(&dout, sizeof(float) * n));
  CHECK(cudaMemcpy(din, h.data(), sizeof(float) * n, cudaMemcpyHostToDevice));

  print_attrs("reverse_mix before", reinterpret_cast<const void*>(reverse_mix));
  expect(run_case(din, dout, h, 4 * 1024, 128), "4 KiB dynamic smem");
  expect(run_case(din, dout, h, 32 * 1024, 256), "32 KiB dynamic smem");
  expect(run_case(din, dout, h, 48 * 1024, 512), "48 KiB dynamic smem (no opt-in needed)");

  // > 48 KiB without opt-in must fail at launch.
  reverse_mix<<<1, 128, 100 * 1024>>>(din, dout, n, 100 * 1024 / 4);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);

  // Opt in to the maximum and use 100 KiB and the maximum.
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(reverse_mix),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  print_attrs("reverse_mix after opt-in", reinterpret_cast<const void*>(reverse_mix));
  expect(run_case(din, dout, h, 100 * 1024, 256), "100 KiB dynamic smem after opt-in");
  expect(run_case(din, dout, h, static_cast<size_t>(optin), 1024), "max opt-in dynamic smem");

  // Static + dynamic: the static part is counted against the opt-in limit.
  print_attrs("static_plus_dynamic before", reinterpret_cast<const void*>(static_plus_dynamic));
  cudaFuncAttributes spd;
  CHECK(cudaFuncGetAttributes(&spd, reinterpret_cast<const void*>(static_plus_dynamic)));
  const int dyn_bytes = optin - static_cast<int>(spd.sharedSizeBytes);
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(static_plus_dynamic),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_bytes));
  print_attrs("static_plus_dynamic after", reinterpret_cast<const void*>(static_plus_dynamic));
  int* dsum;
  const int blocks = 5;
  CHECK(cudaMalloc(&dsum, sizeof(int) * blocks));
  const int dyn_ints = dyn_bytes / 4;
  static_plus_dynamic<<<blocks, 256, dyn_bytes>>>(dsum, dyn_ints);
  CHECK_LAUNCH();
  int sums[blocks];
  CHECK(cudaMemcpy(sums, dsum, sizeof sums, cudaMemcpyDeviceToHost));
  long long want = 0;
  for (int i = 0; i < 1024; ++i) want += i * 3;
  for (int i = 0; i < dyn_ints; ++i) want += i + 7;
  bool ok = true;
  for (int b = 0; b < blocks; ++b) ok = ok && sums[b] == static_cast<int>(want);
  std::printf("static+dynamic dyn_bytes=%d sum=%d\n", dyn_bytes, sums[0]);
  expect(ok, "static + max dynamic shared memory");

  // 1 KiB over the limit must fail.
  static_plus_dynamic<<<1, 256, dyn_bytes + 1024>>>(dsum, dyn_ints);
  EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);

  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dsum));
  return finish("dynamic_smem");
}
