// Kernels for the driver-API test (driver_ptx.cu). This file is NOT a test
// program: CMake compiles it with `nvcc -ptx` and embeds the PTX text into a
// generated header (driver_kernels_ptx.h) that driver_ptx.cu JIT-loads with
// cuModuleLoadData / cuLibraryLoadData.

extern "C" __device__ int dev_counter;
__device__ int dev_counter;

extern "C" __global__ void scale_add(float* out, const float* in, float a, int n, double b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(static_cast<double>(in[i] * a) + b);
}

extern "C" __global__ void iota_u64(unsigned long long* out, unsigned long long base, int n,
                                    unsigned int step) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = base + static_cast<unsigned long long>(i) * step;
}

extern "C" __global__ void count_hits(const int* in, int n, int threshold) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && in[i] > threshold) atomicAdd(&dev_counter, 1);
}
