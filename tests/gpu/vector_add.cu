// 1. Vector add on a 1D grid: cudaMalloc, cudaMemcpy H2D/D2H, cudaFree.
#include <vector>

#include "gpu_test_common.h"

__global__ void vec_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void vec_add_int(const int* a, const int* b, int* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] * 3 - b[i];
}

static void run_float(int n, int block, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> a(n), b(n), c(n, -7.0f);
  for (int i = 0; i < n; ++i) {
    a[i] = rng.unit() * 100.0f;
    b[i] = rng.unit() * 10.0f;
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  size_t bytes = sizeof(float) * static_cast<size_t>(n);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  int grid = (n + block - 1) / block;
  vec_add<<<grid, block>>>(da, db, dc, n);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    if (c[i] != a[i] + b[i]) ++bad;
    sum += c[i];
  }
  std::printf("float n=%d block=%d grid=%d sum=%.6f c[0]=%.6f c[n-1]=%.6f checksum=%016llx bad=%d\n",
              n, block, grid, sum, c[0], c[n - 1],
              static_cast<unsigned long long>(checksum_bytes(c.data(), bytes)), bad);
  char what[96];
  std::snprintf(what, sizeof what, "float vector add n=%d matches host", n);
  expect(bad == 0, what);
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
}

static void run_int(int n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int> a(n), b(n), c(n, 0);
  for (int i = 0; i < n; ++i) {
    a[i] = rng.range(-100000, 100000);
    b[i] = rng.range(-5000, 5000);
  }
  int *da, *db, *dc;
  size_t bytes = sizeof(int) * static_cast<size_t>(n);
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  CHECK(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  vec_add_int<<<(n + 127) / 128, 128>>>(da, db, dc, n);
  CHECK_LAUNCH();
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  long long sum = 0;
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (c[i] != a[i] * 3 - b[i]) ++bad;
    sum += c[i];
  }
  std::printf("int n=%d sum=%lld checksum=%016llx bad=%d\n", n, sum,
              static_cast<unsigned long long>(checksum_bytes(c.data(), bytes)), bad);
  expect(bad == 0, "int vector op matches host");
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
}

int main() {
  run_float(1, 32, 1);
  run_float(31, 32, 2);
  run_float(1000, 256, 3);
  run_float((1 << 20) + 123, 256, 4);
  run_float((1 << 22) + 7, 1024, 5);
  run_int(999983, 6);
  CHECK(cudaFree(nullptr));  // freeing NULL is a no-op
  return finish("vector_add");
}
