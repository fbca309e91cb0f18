// 5. Templated kernels (several instantiations), struct parameters passed by
//    value (64 bytes and 1 KiB), and a kernel with many mixed scalar params.
#include <cmath>
#include <vector>

#include "gpu_test_common.h"

// ---- templated kernels ----
template <typename T, int K>
__global__ void axpy_k(T* y, const T* x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] * static_cast<T>(K);
}

struct AddOp {
  int bias;
  __host__ __device__ int operator()(int v) const { return v + bias; }
};
struct MulXorOp {
  int mul;
  int mask;
  __host__ __device__ int operator()(int v) const { return (v * mul) ^ mask; }
};
template <typename Op>
__global__ void apply_op(int* data, int n, Op op) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = op(data[i]);
}

template <int N>
struct Arr {
  int v[N];
};
template <int N>
__global__ void sum_arr(Arr<N> a, long long* out) {
  __shared__ long long s;
  if (threadIdx.x == 0) s = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < N; i += blockDim.x) atomicAdd(reinterpret_cast<unsigned long long*>(&s),
                                                              static_cast<unsigned long long>(a.v[i] * (i + 1)));
  __syncthreads();
  if (threadIdx.x == 0) *out = s;
}

// ---- struct parameters ----
struct Params64 {
  float coef[12];  // 48
  int n;           // 52
  int mode;        // 56
  double scale;    // 64
};
static_assert(sizeof(Params64) == 64, "Params64 must be 64 bytes");

struct Params1K {
  int table[253];  // 1012
  int n;           // 1016
  double bias;     // 1024
};
static_assert(sizeof(Params1K) == 1024, "Params1K must be 1 KiB");

__global__ void use_p64(Params64 p, const float* in, double* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) {
    float c = p.coef[i % 12];
    double v = p.mode == 1 ? static_cast<double>(in[i]) * c : static_cast<double>(in[i]) + c;
    out[i] = v * p.scale;
  }
}

__global__ void use_p1k(Params1K p, const int* in, double* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < p.n) out[i] = static_cast<double>(p.table[(in[i] & 0x7fffffff) % 253]) + p.bias;
}

__global__ void mixed_params(char c, short s, int i, long long ll, float f, double d,
                             unsigned char uc, const int* ptr, double* out) {
  out[0] = c;
  out[1] = s;
  out[2] = i;
  out[3] = static_cast<double>(ll);
  out[4] = f;
  out[5] = d;
  out[6] = uc;
  out[7] = ptr[0];
}

template <typename T, int K>
static void check_axpy(int n, T a, uint64_t seed, const char* tname) {
  Rng rng(seed);
  std::vector<T> x(n), y(n), r(n);
  for (int i = 0; i < n; ++i) {
    x[i] = static_cast<T>(rng.range(-1000, 1000)) / static_cast<T>(4);
    y[i] = static_cast<T>(rng.range(-1000, 1000)) / static_cast<T>(8);
  }
  T *dx, *dy;
  CHECK(cudaMalloc(&dx, sizeof(T) * n));
  CHECK(cudaMalloc(&dy, sizeof(T) * n));
  CHECK(cudaMemcpy(dx, x.data(), sizeof(T) * n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), sizeof(T) * n, cudaMemcpyHostToDevice));
  axpy_k<T, K><<<(n + 255) / 256, 256>>>(dy, dx, a, n);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(r.data(), dy, sizeof(T) * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    // inputs are small dyadic rationals, so the result is exact in every type
    T want = a * x[i] + y[i] * static_cast<T>(K);
    if (r[i] != want) ++bad;
    sum += static_cast<double>(r[i]);
  }
  std::printf("axpy_k<%s,%d> n=%d sum=%.4f checksum=%016llx bad=%d\n", tname, K, n, sum,
              static_cast<unsigned long long>(checksum_bytes(r.data(), sizeof(T) * n)), bad);
  char what[80];
  std::snprintf(what, sizeof what, "axpy_k<%s,%d> matches host", tname, K);
  expect(bad == 0, what);
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dy));
}

template <typename Op>
static void check_op(Op op, const char* name) {
  const int n = 50000;
  Rng rng(77);
  std::vector<int> h(n), r(n);
  for (auto& v : h) v = rng.range(-100000, 100000);
  int* d;
  CHECK(cudaMalloc(&d, sizeof(int) * n));
  CHECK(cudaMemcpy(d, h.data(), sizeof(int) * n, cudaMemcpyHostToDevice));
  apply_op<<<(n + 127) / 128, 128>>>(d, n, op);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(r.data(), d, sizeof(int) * n, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (r[i] != op(h[i])) ++bad;
  std::printf("apply_op<%s> checksum=%016llx bad=%d\n", name,
              static_cast<unsigned long long>(checksum_bytes(r.data(), sizeof(int) * n)), bad);
  char what[80];
  std::snprintf(what, sizeof what, "apply_op<%s> matches host", name);
  expect(bad == 0, what);
  CHECK(cudaFree(d));
}

template <int N>
static void check_arr(uint64_t seed) {
  Arr<N> a;
  Rng rng(seed);
  long long want = 0;
  for (int i = 0; i < N; ++i) {
    a.v[i] = rng.range(-1000, 1000);
    want += static_cast<long long>(a.v[i]) * (i + 1);
  }
  long long* d;
  CHECK(cudaMalloc(&d, sizeof(long long)));
  sum_arr<N><<<1, 64>>>(a, d);
  CHECK_LAUNCH();
  long long got = 0;
  CHECK(cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost));
  std::printf("sum_arr<%d> (param %zu bytes) = %lld\n", N, sizeof(Arr<N>), got);
  char what[80];
  std::snprintf(what, sizeof what, "sum_arr<%d> by-value array param", N);
  expect(got == want, what);
  CHECK(cudaFree(d));
}

int main() {
  check_axpy<int, 1>(100003, 3, 1, "int");
  check_axpy<int, 3>(4099, -2, 2, "int");
  check_axpy<float, 2>(200001, 0.5f, 3, "float");
  check_axpy<double, 5>(77777, -1.25, 4, "double");
  check_axpy<long long, 7>(12345, 11, 5, "long long");
  check_op(AddOp{12345}, "AddOp");
  check_op(MulXorOp{-3, 0x5a5a}, "MulXorOp");
  check_arr<1>(10);
  check_arr<16>(11);
  check_arr<64>(12);
  check_arr<256>(13);  // 1 KiB by value

  // 64-byte struct
  {
    Params64 p;
    Rng rng(64);
    for (int k = 0; k < 12; ++k) p.coef[k] = static_cast<float>(rng.range(-64, 64)) / 8.0f;
    p.n = 10007;
    p.mode = 1;
    p.scale = 0.5;
    std::vector<float> in(p.n);
    for (auto& v : in) v = static_cast<float>(rng.range(-512, 512)) / 16.0f;
    float* din;
    double* dout;
    CHECK(cudaMalloc(&din, sizeof(float) * p.n));
    CHECK(cudaMalloc(&dout, sizeof(double) * p.n));
    CHECK(cudaMemcpy(din, in.data(), sizeof(float) * p.n, cudaMemcpyHostToDevice));
    std::vector<double> out(p.n);
    int bad = 0;
    for (int mode = 0; mode < 2; ++mode) {
      p.mode = mode;
      use_p64<<<(p.n + 255) / 256, 256>>>(p, din, dout);
      CHECK_LAUNCH();
      CHECK(cudaMemcpy(out.data(), dout, sizeof(double) * p.n, cudaMemcpyDeviceToHost));
      double sum = 0;
      for (int i = 0; i < p.n; ++i) {
        float c = p.coef[i % 12];
        double v = mode == 1 ? static_cast<double>(in[i]) * c : static_cast<double>(in[i]) + c;
        if (out[i] != v * p.scale) ++bad;
        sum += out[i];
      }
      std::printf("Params64 (sizeof=%zu) mode=%d sum=%.6f\n", sizeof(Params64), mode, sum);
    }
    expect(bad == 0, "64-byte struct by value");
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
  }

  // 1 KiB struct
  {
    Params1K p;
    Rng rng(1024);
    for (int k = 0; k < 253; ++k) p.table[k] = rng.range(-1000000, 1000000);
    p.n = 65537;
    p.bias = 0.25;
    std::vector<int> in(p.n);
    for (auto& v : in) v = static_cast<int>(rng.u32());
    int* din;
    double* dout;
    CHECK(cudaMalloc(&din, sizeof(int) * p.n));
    CHECK(cudaMalloc(&dout, sizeof(double) * p.n));
    CHECK(cudaMemcpy(din, in.data(), sizeof(int) * p.n, cudaMemcpyHostToDevice));
    use_p1k<<<(p.n + 255) / 256, 256>>>(p, din, dout);
    CHECK_LAUNCH();
    std::vector<double> out(p.n);
    CHECK(cudaMemcpy(out.data(), dout, sizeof(double) * p.n, cudaMemcpyDeviceToHost));
    int bad = 0;
    double sum = 0;
    for (int i = 0; i < p.n; ++i) {
      double want = static_cast<double>(p.table[(in[i] & 0x7fffffff) % 253]) + p.bias;
      if (out[i] != want) ++bad;
      sum += out[i];
    }
    std::printf("Params1K (sizeof=%zu) sum=%.2f bad=%d\n", sizeof(Params1K), sum, bad);
    expect(bad == 0, "1 KiB struct by value");
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
  }

  // mixed scalar parameter packing / alignment
  {
    int hv = 424242;
    int* dv;
    double* dout;
    CHECK(cudaMalloc(&dv, sizeof(int)));
    CHECK(cudaMalloc(&dout, sizeof(double) * 8));
    CHECK(cudaMemcpy(dv, &hv, sizeof(int), cudaMemcpyHostToDevice));
    mixed_params<<<1, 1>>>(static_cast<char>(-5), static_cast<short>(-31000), 2000000011,
                           -9000000000000LL, 3.5f, -2.0e-3, static_cast<unsigned char>(250), dv, dout);
    CHECK_LAUNCH();
    double out[8];
    CHECK(cudaMemcpy(out, dout, sizeof out, cudaMemcpyDeviceToHost));
    std::printf("mixed params: %.0f %.0f %.0f %.0f %.3f %.6f %.0f %.0f\n", out[0], out[1], out[2],
                out[3], out[4], out[5], out[6], out[7]);
    expect(out[0] == -5 && out[1] == -31000 && out[2] == 2000000011 && out[3] == -9000000000000.0 &&
               out[4] == 3.5 && out[5] == -2.0e-3 && out[6] == 250 && out[7] == 424242,
           "mixed scalar params arrive intact");
    CHECK(cudaFree(dv));
    CHECK(cudaFree(dout));
  }
  return finish("templates_structs");
}
