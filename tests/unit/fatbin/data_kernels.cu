// Test input for declaresModuleData: one kind of module-scope data per file, chosen with -D.

#if defined(WITH_DEVICE_GLOBAL)
__device__ int tallyCounter;
__global__ void tallyCount() { atomicAdd(&tallyCounter, 1); }
#elif defined(WITH_CONSTANT)
__constant__ float tallyCoefficients[4];
__global__ void tallyApply(float* v) { v[threadIdx.x] *= tallyCoefficients[threadIdx.x % 4]; }
#elif defined(WITH_STATIC_GLOBAL)
static __device__ int tallyHidden = 7;
__global__ void tallyBump(int* out) { out[0] = ++tallyHidden; }
#else
// No module-scope data: kernel parameters and shared memory only.
__global__ void tallyPlain(const int* __restrict__ in, int* out, int n) {
  extern __shared__ int tile[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? in[i] : 0;
  __syncthreads();
  if (i < n) out[i] = tile[threadIdx.x] * 2;
}
#endif
