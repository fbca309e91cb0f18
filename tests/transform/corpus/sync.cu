// Corpus: barriers, shared memory, warp-level operations, printf.
#include <cstdio>

extern "C" __global__ void s_static_shared(float* out, const float* in) {
  __shared__ float tile[256];
  tile[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x];
}

extern "C" __global__ void s_dynamic_shared(float* out, int n) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = threadIdx.x + blockIdx.x;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = dyn[(threadIdx.x + 1) % n];
}

extern "C" __global__ void s_dynamic_shared_2(double* out) {
  extern __shared__ double dyn2[];
  dyn2[threadIdx.x] = blockIdx.y;
  __syncthreads();
  out[blockIdx.y * blockDim.x + threadIdx.x] = dyn2[blockDim.x - 1 - threadIdx.x];
}

extern "C" __global__ void s_reduce(const float* in, float* out, int n) {
  __shared__ float buf[512];
  unsigned t = threadIdx.x;
  float v = 0;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += blockDim.x * gridDim.x) v += in[i];
  buf[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}

extern "C" __global__ void s_sync_in_loop(int* data, int iters) {
  __shared__ int sh[128];
  for (int k = 0; k < iters; ++k) {
    sh[threadIdx.x] = data[blockIdx.x * 128 + threadIdx.x] + k;
    __syncthreads();
    data[blockIdx.x * 128 + threadIdx.x] = sh[127 - threadIdx.x];
    __syncthreads();
  }
}

// Threads of a block leave early while the others still reach barriers: the shape PTB must handle.
extern "C" __global__ void s_divergent_exit(int* data, int n) {
  __shared__ int sh[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  sh[threadIdx.x] = data[i];
  __syncthreads();
  data[i] = sh[(threadIdx.x + 1) % blockDim.x];
}

extern "C" __global__ void s_block_exit(int* data) {
  __shared__ int sh[64];
  if (blockIdx.x % 2) return;
  sh[threadIdx.x] = blockIdx.x;
  __syncthreads();
  data[blockIdx.x * 64 + threadIdx.x] = sh[63 - threadIdx.x];
}

extern "C" __global__ void s_sync_or_count(int* out, const int* in) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  int any = __syncthreads_or(v > 10);
  int cnt = __syncthreads_count(v & 1);
  int all = __syncthreads_and(v != 0);
  if (threadIdx.x == 0) out[blockIdx.x] = any + cnt * 2 + all * 4;
}

extern "C" __global__ void s_named_barrier(float* out) {
  __shared__ float sh[128];
  sh[threadIdx.x] = threadIdx.x;
  if (threadIdx.x < 64) {
    asm volatile("bar.sync 1, 64;");
    out[blockIdx.x * 128 + threadIdx.x] = sh[63 - threadIdx.x];
  } else {
    asm volatile("bar.sync 2, 64;");
    out[blockIdx.x * 128 + threadIdx.x] = sh[191 - threadIdx.x];
  }
  asm volatile("bar.arrive 3, 128;");
}

extern "C" __global__ void s_shuffle(float* out) {
  float v = out[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
  float w = __shfl_sync(0xffffffff, v, 0);
  float x = __shfl_xor_sync(0xffffffff, w, 1);
  float y = __shfl_up_sync(0xffffffff, x, 2);
  out[blockIdx.x * blockDim.x + threadIdx.x] = y;
}

extern "C" __global__ void s_votes(unsigned* out, const int* in) {
  int v = in[blockIdx.x * blockDim.x + threadIdx.x];
  unsigned b = __ballot_sync(0xffffffff, v > 0);
  int a = __all_sync(0xffffffff, v > 0);
  int y = __any_sync(0xffffffff, v < 0);
  unsigned m = __match_any_sync(0xffffffff, v);
  unsigned act = __activemask();
  out[blockIdx.x * blockDim.x + threadIdx.x] = b + a + y + m + act + __popc(b);
  __syncwarp();
}

extern "C" __global__ void s_warp_reduce(int* out) {
  int v = threadIdx.x + blockIdx.z;
  v = __reduce_add_sync(0xffffffff, v);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}

extern "C" __global__ void s_printf(int n) {
  if (threadIdx.x == 0) printf("block %d of %d, n=%d\n", blockIdx.x, gridDim.x, n);
}

extern "C" __global__ void s_printf_float(float f, double d) {
  printf("values %f %f %d\n", f, d, blockIdx.y);
}

extern "C" __global__ void s_memfence(int* flag, int* data) {
  data[blockIdx.x] = 1;
  __threadfence();
  if (threadIdx.x == 0) atomicExch(flag, 1);
  __threadfence_block();
}

extern "C" __global__ void s_shared_atomics(int* out) {
  __shared__ int hist[16];
  if (threadIdx.x < 16) hist[threadIdx.x] = 0;
  __syncthreads();
  atomicAdd(&hist[(threadIdx.x * 7 + blockIdx.x) % 16], 1);
  __syncthreads();
  if (threadIdx.x < 16) atomicAdd(&out[threadIdx.x], hist[threadIdx.x]);
}

extern "C" __global__ void s_clock(long long* out) {
  long long t0 = clock64();
  __nanosleep(100);
  out[blockIdx.x] = clock64() - t0;
}
