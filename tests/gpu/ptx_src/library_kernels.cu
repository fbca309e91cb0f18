// Kernels for the library-management test (library_management.cu). This file is NOT a test
// program: CMake compiles it with `nvcc -fatbin` (sm_90 code and its PTX) and embeds the fatbin
// into a generated header (library_kernels_fatbin.h) that library_management.cu loads with
// cudaLibraryLoadData. Exactly three kernels: the test counts them.

__device__ int lib_bias = 7;  // initialized: read, then changed, through cudaLibraryGetGlobal
__device__ int lib_total;     // what lib_accumulate adds up

extern "C" __global__ void lib_scale(int* out, const int* in, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * factor + lib_bias;
}

extern "C" __global__ void lib_accumulate(const int* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&lib_total, in[i]);
}

extern "C" __global__ void lib_iota(int* out, int base, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = base + i;
}
