// Corpus: kernels the transformer must refuse (and a few neighbours it must accept).
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void i_grid_sync(int* data) {
  cg::grid_group g = cg::this_grid();
  data[g.thread_rank()] = 1;
  g.sync();
  data[g.thread_rank()] += data[0];
}

extern "C" __global__ void i_block_group_ok(int* data) {
  cg::thread_block b = cg::this_thread_block();
  data[blockIdx.x * blockDim.x + b.thread_rank()] = 2;
  b.sync();
  cg::thread_block_tile<32> w = cg::tiled_partition<32>(b);
  data[blockIdx.x] = w.shfl(data[0], 0);
}

extern "C" __global__ void i_smid(unsigned* out) {
  unsigned s;
  asm("mov.u32 %0, %%smid;" : "=r"(s));
  out[blockIdx.x] = s;
}

extern "C" __global__ void i_nsmid(unsigned* out) {
  unsigned s;
  asm("mov.u32 %0, %%nsmid;" : "=r"(s));
  out[blockIdx.x] = s;
}

extern "C" __global__ void i_gridid(unsigned long long* out) {
  unsigned long long g;
  asm("mov.u64 %0, %%gridid;" : "=l"(g));
  out[blockIdx.x] = g;
}

__device__ __noinline__ unsigned func_smid() {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  return s;
}
extern "C" __global__ void i_func_smid(unsigned* out) { out[threadIdx.x] = func_smid(); }

__device__ __noinline__ unsigned func_grid() { return gridDim.x * 2; }
extern "C" __global__ void i_func_nctaid(unsigned* out) { out[threadIdx.x] = func_grid(); }
