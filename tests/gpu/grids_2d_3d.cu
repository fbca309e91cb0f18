// 3. 2D and 3D grids (dim3): kernels write index functions, checked on host.
#include <vector>

#include "gpu_test_common.h"

__host__ __device__ inline unsigned int f2(unsigned int x, unsigned int y, unsigned int in) {
  return (x * 7919u) ^ (y * 104729u) ^ (in * 2654435761u);
}
__host__ __device__ inline unsigned int f3(unsigned int x, unsigned int y, unsigned int z) {
  return x + 1000u * y + 1000000u * z + ((x ^ y ^ z) << 28);
}
// Encodes which block/thread wrote an element.
__host__ __device__ inline unsigned int who(unsigned int bx, unsigned int by, unsigned int tx,
                                            unsigned int ty) {
  return (bx << 20) | (by << 10) | (tx << 5) | ty;
}

__global__ void write2d(const unsigned int* in, unsigned int* out, unsigned int* owner, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    out[y * w + x] = f2(x, y, in[y * w + x]);
    owner[y * w + x] = who(blockIdx.x, blockIdx.y, threadIdx.x, threadIdx.y);
  }
}

__global__ void write3d(unsigned int* out, int nx, int ny, int nz, unsigned int* dims) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z * blockDim.z + threadIdx.z;
  if (x < nx && y < ny && z < nz) out[(static_cast<size_t>(z) * ny + y) * nx + x] = f3(x, y, z);
  if (x == 0 && y == 0 && z == 0) {
    dims[0] = gridDim.x; dims[1] = gridDim.y; dims[2] = gridDim.z;
    dims[3] = blockDim.x; dims[4] = blockDim.y; dims[5] = blockDim.z;
  }
}

// A long 1D grid (> 65535 blocks in x) and a grid using only y and z.
__global__ void write_linear(unsigned int* out, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3u + 1u;
}
__global__ void write_yz(unsigned int* out, int ny, int nz) {
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  int z = blockIdx.z;
  if (y < ny && z < nz) out[z * ny + y] = (z << 16) | y;
}

int main() {
  // ---- 2D ----
  const int w = 1000, h = 777;
  Rng rng(33);
  std::vector<unsigned int> in(w * h), out(w * h), owner(w * h);
  for (auto& v : in) v = rng.u32();
  unsigned int *din, *dout, *downer;
  CHECK(cudaMalloc(&din, sizeof(unsigned int) * w * h));
  CHECK(cudaMalloc(&dout, sizeof(unsigned int) * w * h));
  CHECK(cudaMalloc(&downer, sizeof(unsigned int) * w * h));
  CHECK(cudaMemcpy(din, in.data(), sizeof(unsigned int) * w * h, cudaMemcpyHostToDevice));
  dim3 block2(16, 8);
  dim3 grid2((w + block2.x - 1) / block2.x, (h + block2.y - 1) / block2.y);
  write2d<<<grid2, block2>>>(din, dout, downer, w, h);
  CHECK_LAUNCH();
  CHECK(cudaMemcpy(out.data(), dout, sizeof(unsigned int) * w * h, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(owner.data(), downer, sizeof(unsigned int) * w * h, cudaMemcpyDeviceToHost));
  int bad = 0, bad_owner = 0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      if (out[y * w + x] != f2(x, y, in[y * w + x])) ++bad;
      if (owner[y * w + x] != who(x / block2.x, y / block2.y, x % block2.x, y % block2.y)) ++bad_owner;
    }
  std::printf("2d grid=(%u,%u) block=(%u,%u) checksum=%016llx owner_checksum=%016llx\n", grid2.x,
              grid2.y, block2.x, block2.y,
              static_cast<unsigned long long>(checksum_bytes(out.data(), out.size() * 4)),
              static_cast<unsigned long long>(checksum_bytes(owner.data(), owner.size() * 4)));
  expect(bad == 0, "2D values match host");
  expect(bad_owner == 0, "2D block/thread indices match host");

  // ---- 3D ----
  const int nx = 67, ny = 45, nz = 33;
  const size_t n3 = static_cast<size_t>(nx) * ny * nz;
  std::vector<unsigned int> o3(n3);
  unsigned int *d3, *ddims;
  CHECK(cudaMalloc(&d3, sizeof(unsigned int) * n3));
  CHECK(cudaMalloc(&ddims, sizeof(unsigned int) * 6));
  CHECK(cudaMemset(d3, 0xFF, sizeof(unsigned int) * n3));
  dim3 block3(8, 4, 4);
  dim3 grid3((nx + 7) / 8, (ny + 3) / 4, (nz + 3) / 4);
  write3d<<<grid3, block3>>>(d3, nx, ny, nz, ddims);
  CHECK_LAUNCH();
  unsigned int dims[6];
  CHECK(cudaMemcpy(o3.data(), d3, sizeof(unsigned int) * n3, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(dims, ddims, sizeof dims, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int z = 0; z < nz; ++z)
    for (int y = 0; y < ny; ++y)
      for (int x = 0; x < nx; ++x)
        if (o3[(static_cast<size_t>(z) * ny + y) * nx + x] != f3(x, y, z)) ++bad;
  std::printf("3d grid=(%u,%u,%u) block=(%u,%u,%u) seen grid=(%u,%u,%u) block=(%u,%u,%u) checksum=%016llx\n",
              grid3.x, grid3.y, grid3.z, block3.x, block3.y, block3.z, dims[0], dims[1], dims[2],
              dims[3], dims[4], dims[5],
              static_cast<unsigned long long>(checksum_bytes(o3.data(), n3 * 4)));
  expect(bad == 0, "3D values match host");
  expect(dims[0] == grid3.x && dims[1] == grid3.y && dims[2] == grid3.z && dims[3] == block3.x &&
             dims[4] == block3.y && dims[5] == block3.z,
         "gridDim/blockDim seen by kernel");

  // ---- long 1D grid (> 65535 blocks) ----
  const unsigned int nl = 70000u * 64u + 5u;
  unsigned int* dl;
  CHECK(cudaMalloc(&dl, sizeof(unsigned int) * nl));
  write_linear<<<(nl + 63) / 64, 64>>>(dl, nl);
  CHECK_LAUNCH();
  std::vector<unsigned int> ol(nl);
  CHECK(cudaMemcpy(ol.data(), dl, sizeof(unsigned int) * nl, cudaMemcpyDeviceToHost));
  bad = 0;
  for (unsigned int i = 0; i < nl; ++i)
    if (ol[i] != i * 3u + 1u) ++bad;
  std::printf("linear blocks=%u checksum=%016llx\n", (nl + 63) / 64,
              static_cast<unsigned long long>(checksum_bytes(ol.data(), ol.size() * 4)));
  expect(bad == 0, "1D grid with >65535 blocks");

  // ---- y/z-only grid ----
  const int ny2 = 300, nz2 = 70;
  unsigned int* dyz;
  CHECK(cudaMalloc(&dyz, sizeof(unsigned int) * ny2 * nz2));
  write_yz<<<dim3(1, (ny2 + 31) / 32, nz2), dim3(1, 32, 1)>>>(dyz, ny2, nz2);
  CHECK_LAUNCH();
  std::vector<unsigned int> oyz(ny2 * nz2);
  CHECK(cudaMemcpy(oyz.data(), dyz, sizeof(unsigned int) * ny2 * nz2, cudaMemcpyDeviceToHost));
  bad = 0;
  for (int z = 0; z < nz2; ++z)
    for (int y = 0; y < ny2; ++y)
      if (oyz[z * ny2 + y] != static_cast<unsigned int>((z << 16) | y)) ++bad;
  std::printf("yz grid checksum=%016llx\n",
              static_cast<unsigned long long>(checksum_bytes(oyz.data(), oyz.size() * 4)));
  expect(bad == 0, "y/z-only grid");

  CHECK(cudaFree(din));
  CHECK(cudaFree(dout));
  CHECK(cudaFree(downer));
  CHECK(cudaFree(d3));
  CHECK(cudaFree(ddims));
  CHECK(cudaFree(dl));
  CHECK(cudaFree(dyz));
  return finish("grids_2d_3d");
}
