// Virtual memory management as PyTorch's expandable_segments uses it: driver functions resolved
// through cudaGetDriverEntryPointByVersion, one address reservation grown by mapping allocation
// handles one after another (cuMemCreate, cuMemMap, cuMemSetAccess), kernels and copies across
// the seam between two handles, cuMemGetAccess, cuMemRetainAllocationHandle, then shrinking
// (cuMemUnmap, cuMemRelease) and cuMemAddressFree.
// Exits 77 (skip) when no GPU is visible or the device has no virtual memory management.
#include <cuda.h>

#include <vector>

#include "gpu_test_common.h"


#define DRV(call)                                                                     \
  do {                                                                                \
    CUresult drv_r_ = (call);                                                         \
    if (drv_r_ != CUDA_SUCCESS) {                                                     \
      std::printf("FATAL line %d: %s -> %d\n", __LINE__, #call, static_cast<int>(drv_r_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

__global__ void fill(int* p, size_t n, int base) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = base + static_cast<int>(i);
}

struct Vmm {
  decltype(&cuMemGetAllocationGranularity) granularity =
      driver_fn<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  decltype(&cuMemCreate) create = driver_fn<decltype(&cuMemCreate)>("cuMemCreate");
  decltype(&cuMemRelease) release = driver_fn<decltype(&cuMemRelease)>("cuMemRelease");
  decltype(&cuMemAddressReserve) reserve = driver_fn<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  decltype(&cuMemAddressFree) addressFree = driver_fn<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  decltype(&cuMemMap) map = driver_fn<decltype(&cuMemMap)>("cuMemMap");
  decltype(&cuMemUnmap) unmap = driver_fn<decltype(&cuMemUnmap)>("cuMemUnmap");
  decltype(&cuMemSetAccess) setAccess = driver_fn<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  decltype(&cuMemGetAccess) getAccess = driver_fn<decltype(&cuMemGetAccess)>("cuMemGetAccess");
  decltype(&cuMemRetainAllocationHandle) retain =
      driver_fn<decltype(&cuMemRetainAllocationHandle)>("cuMemRetainAllocationHandle");
};

static CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

// Maps `handle` at `at` and makes it read-write for device 0, as an expandable segment grows.
static void map_piece(Vmm& v, CUdeviceptr at, size_t size, CUmemGenericAllocationHandle handle) {
  DRV(v.map(at, size, 0, handle, 0));
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DRV(v.setAccess(at, size, &access, 1));
}

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    std::printf("SKIP: no GPU visible\n");
    return 77;
  }
  int vmm = 0;
  CHECK(cudaDeviceGetAttribute(&vmm, static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), 0));
  std::printf("virtual memory management supported: %d\n", vmm);
  if (!vmm) {
    std::printf("SKIP: the device has no virtual memory management\n");
    return 77;
  }
  Vmm v;
  CUmemAllocationProp prop = device_prop();
  size_t g = 0;
  DRV(v.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  std::printf("granularity: %zu\n", g);

  // A segment of 8 granules reserved up front; grown by two handles of 2 granules each.
  const size_t pieces = 2, piece = 2 * g, reserved = 8 * g;
  CUdeviceptr base = 0;
  DRV(v.reserve(&base, reserved, 0, 0, 0));
  CUmemGenericAllocationHandle handles[pieces];
  for (size_t i = 0; i < pieces; ++i) {
    DRV(v.create(&handles[i], piece, &prop, 0));
    map_piece(v, base + i * piece, piece, handles[i]);
  }
  // One kernel and one copy over both pieces: a tensor lying across the seam.
  size_t n = pieces * piece / sizeof(int);
  int* ints = reinterpret_cast<int*>(base);
  fill<<<static_cast<unsigned>((n + 255) / 256), 256>>>(ints, n, 3);
  CHECK_LAUNCH();
  const size_t window = 4096;
  size_t seam = piece / sizeof(int);
  std::vector<int> h(window);
  CHECK(cudaMemcpy(h.data(), ints + seam - window / 2, window * sizeof(int), cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < window; ++i) ok = ok && h[i] == 3 + static_cast<int>(seam - window / 2 + i);
  expect(ok, "a copy across the seam of two handles");
  CHECK(cudaMemset(ints + seam - 16, 0, 32 * sizeof(int)));
  CHECK(cudaMemcpy(h.data(), ints + seam - 16, 32 * sizeof(int), cudaMemcpyDeviceToHost));
  ok = true;
  for (int i = 0; i < 32; ++i) ok = ok && h[i] == 0;
  expect(ok, "a memset across the seam");

  CUmemLocation where{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  unsigned long long flags = 0;
  DRV(v.getAccess(&flags, &where, base + piece + 64));
  std::printf("access flags: %llu\n", flags);
  CUmemGenericAllocationHandle retained = 0;
  DRV(v.retain(&retained, reinterpret_cast<void*>(base + piece + 64)));
  DRV(v.release(retained));  // one reference each: cuMemCreate's stays

  // Shrink as PyTorch does: unmap then release, one piece at a time; then grow again.
  DRV(v.unmap(base + piece, piece));
  DRV(v.release(handles[1]));
  DRV(v.create(&handles[1], piece, &prop, 0));
  map_piece(v, base + piece, piece, handles[1]);
  fill<<<static_cast<unsigned>((n + 255) / 256), 256>>>(ints, n, 11);
  CHECK(cudaMemcpy(h.data(), ints + seam - window / 2, window * sizeof(int), cudaMemcpyDeviceToHost));
  ok = true;
  for (size_t i = 0; i < window; ++i) ok = ok && h[i] == 11 + static_cast<int>(seam - window / 2 + i);
  expect(ok, "a piece mapped again is usable across the seam");

  for (size_t i = 0; i < pieces; ++i) {
    DRV(v.unmap(base + i * piece, piece));
    DRV(v.release(handles[i]));
  }
  DRV(v.addressFree(base, reserved));
  expect(true, "unmapped, released, freed");
  return finish("virtual_memory");
}
