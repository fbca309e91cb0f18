// Corpus for the PTX front end and the sliced transform: grid shapes, parameters, control flow.
// Kernels are extern "C" so the expected-eligibility table can name them plainly.
#include <cstdint>

struct Small { int a; float b; };
struct Big { float m[16]; int n; double d[4]; };
struct Mixed { char c; double d; short s; int* p; };

extern "C" __global__ void k_1d(float* out, const float* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f;
}

extern "C" __global__ void k_2d(float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = x + y;
}

extern "C" __global__ void k_3d(float* out, int w, int h, int d) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < w && y < h && z < d) out[(z * h + y) * w + x] = 1.0f;
}

extern "C" __global__ void k_grid_stride(float* out, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] += 1.0f;
}

extern "C" __global__ void k_grid_stride_2d(float* out, int w, int h) {
  for (int y = blockIdx.y; y < h; y += gridDim.y)
    for (int x = blockIdx.x * blockDim.x + threadIdx.x; x < w; x += gridDim.x * blockDim.x)
      out[y * w + x] = y;
}

extern "C" __global__ void k_grid_dims_out(unsigned* out) {
  if (threadIdx.x == 0) {
    unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[4 * b] = gridDim.x; out[4 * b + 1] = gridDim.y; out[4 * b + 2] = gridDim.z; out[4 * b + 3] = b;
  }
}

extern "C" __global__ void k_block_id_64(unsigned long long* out) {
  unsigned long long b = (unsigned long long)blockIdx.x * gridDim.y + blockIdx.y;
  out[b] = b * blockIdx.z;
}

extern "C" __global__ void k_early_return(int* out, int n) {
  if (blockIdx.x == 3) return;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = i;
}

extern "C" __global__ void k_atomics(int* counter, unsigned* mx, float* sum, unsigned long long* cas) {
  atomicAdd(counter, 1);
  atomicMax(mx, blockIdx.x);
  atomicAdd(sum, 0.5f);
  atomicCAS(cas, 0ull, (unsigned long long)blockIdx.x + 1);
  atomicExch(counter + 1, threadIdx.x);
}

extern "C" __global__ void k_small_struct(Small s, float* out) { out[blockIdx.x] = s.a + s.b; }

extern "C" __global__ void k_big_struct(Big big, float* out) {
  float acc = big.n;
  for (int i = 0; i < 16; ++i) acc += big.m[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc + big.d[threadIdx.x % 4];
}

extern "C" __global__ void k_mixed_struct(Mixed m, Small s2, Big b2, int tail) {
  m.p[blockIdx.x] = m.c + (int)m.d + m.s + s2.a + (int)b2.m[3] + tail;
}

extern "C" __global__ void k_many_params(int* o, int a0, int a1, int a2, int a3, int a4, int a5, int a6, int a7,
                                         int a8, int a9, long a10, long a11, float a12, float a13, double a14,
                                         double a15, char a16, short a17, unsigned a18, int* a19) {
  o[blockIdx.x] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + (int)(a10 + a11) + (int)(a12 + a13) +
                  (int)(a14 + a15) + a16 + a17 + a18 + a19[0];
}

extern "C" __global__ void k_no_params() {}

extern "C" __global__ void k_no_params_block(unsigned* dummy) {
  if (blockIdx.x > 100000) *dummy = 0;
}

__device__ __noinline__ float helper_scale(float v, float s) { return v * s + 1.0f; }
__device__ __noinline__ int2 helper_pair(int a) { return make_int2(a, a * 2); }

extern "C" __global__ void k_device_funcs(float* out, int2* pairs) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = helper_scale(out[i], 3.0f);
  pairs[i] = helper_pair(i);
}

__device__ __noinline__ unsigned helper_block_linear() { return blockIdx.x + blockIdx.y * gridDim.x; }

extern "C" __global__ void k_func_reads_ctaid(unsigned* out) { out[helper_block_linear()] = threadIdx.x; }

extern "C" __global__ void k_local_array(int* out, int k) {
  int arr[32];
  for (int i = 0; i < 32; ++i) arr[i] = i * k + blockIdx.x;
  out[blockIdx.x * blockDim.x + threadIdx.x] = arr[(threadIdx.x + k) % 32];
}

extern "C" __global__ void k_switch(int* out, int sel) {
  int v;
  switch ((sel + blockIdx.x) % 5) {
    case 0: v = 10; break;
    case 1: v = out[1] * 3; break;
    case 2: v = -7; break;
    case 3: v = out[2] ^ 5; break;
    default: v = 0;
  }
  out[blockIdx.x] = v;
}

template <typename T, int N>
__global__ void k_template(T* out, T v) {
  T acc = v;
#pragma unroll
  for (int i = 0; i < N; ++i) acc = acc * v + (T)blockIdx.x;
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
template __global__ void k_template<float, 4>(float*, float);
template __global__ void k_template<double, 2>(double*, double);
template __global__ void k_template<int, 8>(int*, int);

extern "C" __global__ void __launch_bounds__(256, 2) k_launch_bounds(float* out) {
  out[blockIdx.x * 256 + threadIdx.x] = 0.0f;
}

extern "C" __global__ void k_math(float* out, double* dout) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = out[i];
  out[i] = sinf(x) + expf(x) / (1.0f + sqrtf(fabsf(x))) + __fdividef(x, 3.0f);
  dout[i] = sin((double)blockIdx.y) + pow(dout[i], 1.5);
}

__device__ int g_counter;
__device__ float g_table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__constant__ int c_weights[8] = {1, 2, 3, 4, 5, 6, 7, 8};

extern "C" __global__ void k_globals(float* out) {
  atomicAdd(&g_counter, 1);
  out[blockIdx.x] = g_table[blockIdx.x % 4] * c_weights[threadIdx.x % 8];
}
