// Test input for tally_fatbin: compiled by nvcc at build time into fatbins and an object file.
// The names are checked in the PTX, so changing them means changing fatbin_test.cc.

extern "C" __global__ void tallyAddOne(int* values, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) values[i] += 1;
}

__global__ void tallyScale(float* values, float factor, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) values[i] *= factor;
}

template <typename T>
__global__ void tallyFill(T* values, T value, int count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) values[i] = value;
}
template __global__ void tallyFill<double>(double*, double, int);
