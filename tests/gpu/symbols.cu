// 6. __device__ globals and __constant__ memory: cudaMemcpyToSymbol /
//    cudaMemcpyFromSymbol (+Async, with offsets, D2D kind), cudaGetSymbolAddress,
//    cudaGetSymbolSize.
#include <vector>

#include "gpu_test_common.h"

constexpr int kTable = 1024;
constexpr int kCoef = 64;

struct Cfg {
  int n;
  float scale;
  int shift;
  int pad;
};

__device__ int g_counter;
__device__ float g_table[kTable];
__device__ unsigned long long g_wide[4] = {1ull, 2ull, 3ull, 0xfedcba9876543210ull};
__constant__ float c_coef[kCoef];
__constant__ Cfg c_cfg;

__global__ void combine(float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < c_cfg.n) {
    out[i] = g_table[i % kTable] * c_coef[(i + c_cfg.shift) % kCoef] * c_cfg.scale;
    atomicAdd(&g_counter, 1);
  }
}

__global__ void bump_table(float delta) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kTable) g_table[i] += delta;
  if (i < 4) g_wide[i] = g_wide[i] * 3 + 1;
}

int main() {
  Rng rng(6);
  std::vector<float> table(kTable), coef(kCoef);
  for (auto& v : table) v = static_cast<float>(rng.range(-512, 512)) / 32.0f;
  for (auto& v : coef) v = static_cast<float>(rng.range(-16, 16)) / 4.0f;
  Cfg cfg{5000, 0.5f, 3, 0};

  // Sizes
  size_t sz_table = 0, sz_coef = 0, sz_cfg = 0, sz_counter = 0;
  CHECK(cudaGetSymbolSize(&sz_table, g_table));
  CHECK(cudaGetSymbolSize(&sz_coef, c_coef));
  CHECK(cudaGetSymbolSize(&sz_cfg, c_cfg));
  CHECK(cudaGetSymbolSize(&sz_counter, g_counter));
  std::printf("symbol sizes: g_table=%zu c_coef=%zu c_cfg=%zu g_counter=%zu\n", sz_table, sz_coef,
              sz_cfg, sz_counter);
  expect(sz_table == sizeof(float) * kTable && sz_coef == sizeof(float) * kCoef &&
             sz_cfg == sizeof(Cfg) && sz_counter == sizeof(int),
         "cudaGetSymbolSize");

  // Initialised __device__ data is visible before any write.
  unsigned long long wide[4];
  CHECK(cudaMemcpyFromSymbol(wide, g_wide, sizeof wide));
  std::printf("g_wide initial: %llu %llu %llu %016llx\n", wide[0], wide[1], wide[2], wide[3]);
  expect(wide[0] == 1 && wide[1] == 2 && wide[2] == 3 && wide[3] == 0xfedcba9876543210ull,
         "static initialiser of __device__ array");

  // Synchronous copies: the table in two halves (second with an offset).
  const int zero = 0;
  CHECK(cudaMemcpyToSymbol(g_counter, &zero, sizeof(int)));
  CHECK(cudaMemcpyToSymbol(g_table, table.data(), sizeof(float) * kTable / 2));
  CHECK(cudaMemcpyToSymbol(g_table, table.data() + kTable / 2, sizeof(float) * kTable / 2,
                           sizeof(float) * kTable / 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyToSymbol(c_coef, coef.data(), sizeof(float) * kCoef));
  CHECK(cudaMemcpyToSymbol(c_cfg, &cfg, sizeof cfg));

  float* dout;
  CHECK(cudaMalloc(&dout, sizeof(float) * cfg.n));
  combine<<<(cfg.n + 255) / 256, 256>>>(dout);
  CHECK_LAUNCH();
  std::vector<float> out(cfg.n);
  CHECK(cudaMemcpy(out.data(), dout, sizeof(float) * cfg.n, cudaMemcpyDeviceToHost));
  int counter = -1;
  CHECK(cudaMemcpyFromSymbol(&counter, g_counter, sizeof(int)));
  int bad = 0;
  for (int i = 0; i < cfg.n; ++i) {
    float want = table[i % kTable] * coef[(i + cfg.shift) % kCoef] * cfg.scale;
    if (out[i] != want) ++bad;
  }
  std::printf("combine: counter=%d checksum=%016llx bad=%d\n", counter,
              static_cast<unsigned long long>(checksum_bytes(out.data(), out.size() * 4)), bad);
  expect(bad == 0, "kernel reads __device__ + __constant__ data");
  expect(counter == cfg.n, "atomic counter in __device__ global");

  // Read back a slice with an offset.
  float slice[8];
  CHECK(cudaMemcpyFromSymbol(slice, g_table, sizeof slice, sizeof(float) * 600, cudaMemcpyDeviceToHost));
  expect(std::memcmp(slice, table.data() + 600, sizeof slice) == 0, "cudaMemcpyFromSymbol with offset");

  // Async variants on a stream, with pinned host memory.
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  Cfg* hcfg;
  float* hcoef;
  int* hcounter;
  CHECK(cudaMallocHost(&hcfg, sizeof(Cfg)));
  CHECK(cudaMallocHost(&hcoef, sizeof(float) * kCoef));
  CHECK(cudaMallocHost(&hcounter, sizeof(int)));
  *hcfg = Cfg{3000, 2.0f, 17, 0};
  for (int k = 0; k < kCoef; ++k) hcoef[k] = coef[kCoef - 1 - k];
  *hcounter = 100;
  CHECK(cudaMemcpyToSymbolAsync(c_cfg, hcfg, sizeof(Cfg), 0, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyToSymbolAsync(c_coef, hcoef, sizeof(float) * kCoef, 0, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyToSymbolAsync(g_counter, hcounter, sizeof(int), 0, cudaMemcpyHostToDevice, s));
  combine<<<(hcfg->n + 127) / 128, 128, 0, s>>>(dout);
  CHECK_LAUNCH();
  // (hcounter must stay untouched until the stream is synchronised; read into a second buffer)
  int* hcounter2;
  CHECK(cudaMallocHost(&hcounter2, sizeof(int)));
  *hcounter2 = -1;
  CHECK(cudaMemcpyFromSymbolAsync(hcounter2, g_counter, sizeof(int), 0, cudaMemcpyDeviceToHost, s));
  float* hout;
  CHECK(cudaMallocHost(&hout, sizeof(float) * 3000));
  CHECK(cudaMemcpyAsync(hout, dout, sizeof(float) * 3000, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  bad = 0;
  for (int i = 0; i < 3000; ++i) {
    float want = table[i % kTable] * coef[kCoef - 1 - (i + 17) % kCoef] * 2.0f;
    if (hout[i] != want) ++bad;
  }
  std::printf("async combine: counter=%d checksum=%016llx bad=%d\n", *hcounter2,
              static_cast<unsigned long long>(checksum_bytes(hout, 3000 * 4)), bad);
  expect(bad == 0, "async symbol copies + kernel");
  expect(*hcounter2 == 3100, "cudaMemcpyFromSymbolAsync counter");

  // cudaGetSymbolAddress: use the pointer with ordinary memcpy/memset and kernels.
  float* table_ptr = nullptr;
  CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&table_ptr), g_table));
  expect(table_ptr != nullptr, "cudaGetSymbolAddress non-null");
  std::vector<float> back(kTable);
  CHECK(cudaMemcpy(back.data(), table_ptr, sizeof(float) * kTable, cudaMemcpyDeviceToHost));
  expect(back == table, "cudaMemcpy via symbol address == table");
  bump_table<<<(kTable + 255) / 256, 256>>>(1.5f);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(back.data(), table_ptr, sizeof(float) * kTable, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int i = 0; i < kTable; ++i)
    if (back[i] != table[i] + 1.5f) ++bad;
  expect(bad == 0, "kernel writes visible through symbol address");
  CHECK(cudaMemcpyFromSymbol(wide, g_wide, sizeof wide));
  std::printf("g_wide after bump: %llu %llu %llu %016llx\n", wide[0], wide[1], wide[2], wide[3]);
  expect(wide[0] == 4 && wide[1] == 7 && wide[2] == 10, "g_wide updated by kernel");
  CHECK(cudaMemset(table_ptr, 0, sizeof(float) * 16));
  CHECK(cudaMemcpyFromSymbol(slice, g_table, sizeof slice));
  expect(slice[0] == 0.0f && slice[7] == 0.0f, "cudaMemset through symbol address");

  // Device-to-device copy into a symbol, and from a symbol into device memory.
  float* dsrc;
  CHECK(cudaMalloc(&dsrc, sizeof(float) * kCoef));
  CHECK(cudaMemcpy(dsrc, coef.data(), sizeof(float) * kCoef, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpyToSymbol(c_coef, dsrc, sizeof(float) * kCoef, 0, cudaMemcpyDeviceToDevice));
  float* ddst;
  CHECK(cudaMalloc(&ddst, sizeof(float) * kCoef));
  CHECK(cudaMemcpyFromSymbol(ddst, c_coef, sizeof(float) * kCoef, 0, cudaMemcpyDeviceToDevice));
  std::vector<float> coef_back(kCoef);
  CHECK(cudaMemcpy(coef_back.data(), ddst, sizeof(float) * kCoef, cudaMemcpyDeviceToHost));
  expect(coef_back == coef, "D2D to/from __constant__ symbol");

  CHECK(cudaFreeHost(hcfg));
  CHECK(cudaFreeHost(hcoef));
  CHECK(cudaFreeHost(hcounter));
  CHECK(cudaFreeHost(hcounter2));
  CHECK(cudaFreeHost(hout));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(dsrc));
  CHECK(cudaFree(ddst));
  CHECK(cudaStreamDestroy(s));
  return finish("symbols");
}
