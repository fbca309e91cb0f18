// Shows that the fake GPU turns a write one byte past a device allocation into an
// AddressSanitizer report, which is what the session fuzzer and its replay rely on: a memset
// of exactly the allocation passes, one byte more must be stopped by ASan
// (CTest security.fake_gpu_catches_overrun expects "heap-buffer-overflow").
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>

int main() {
  // Found as tallyd finds it: by name, through this executable's DT_RPATH.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::printf("cannot load the fake driver: %s\n", dlerror());
    return 2;
  }
  auto alloc = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(driver, "cuMemAlloc_v2"));
  auto memsetD8 = reinterpret_cast<CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream)>(
      dlsym(driver, "cuMemsetD8Async"));
  CUdeviceptr p = 0;
  if (alloc == nullptr || memsetD8 == nullptr || alloc(&p, 64) != CUDA_SUCCESS) {
    std::printf("the fake driver lacks cuMemAlloc_v2 or cuMemsetD8Async\n");
    return 2;
  }
  std::printf("in-range memset: CUresult %d\n", memsetD8(p, 0, 64, nullptr));
  std::fflush(stdout);
  memsetD8(p, 0, 65, nullptr);  // one byte past the allocation
  std::printf("overrun not detected\n");
  return 0;
}
