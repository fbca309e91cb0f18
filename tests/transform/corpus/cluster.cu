// Corpus (sm_90 only): cluster kernels and programmatic dependent launch.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void __cluster_dims__(2, 1, 1) c_cluster_dims(int* out) {
  out[blockIdx.x] = threadIdx.x;
}

extern "C" __global__ void c_cluster_rank(int* out) {
  cg::cluster_group c = cg::this_cluster();
  out[blockIdx.x] = c.block_rank();
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) c_dsmem(int* out) {
  __shared__ int sh[32];
  cg::cluster_group c = cg::this_cluster();
  sh[threadIdx.x] = threadIdx.x;
  c.sync();
  int* remote = c.map_shared_rank(sh, (c.block_rank() + 1) % 2);
  out[blockIdx.x * 32 + threadIdx.x] = remote[threadIdx.x];
  c.sync();
}

extern "C" __global__ void c_griddep(int* out) {
  cudaGridDependencySynchronize();
  out[blockIdx.x] = 1;
  cudaTriggerProgrammaticLaunchCompletion();
}

extern "C" __global__ void c_plain_sm90(float* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }
