// Driver-API contexts, as the driver-API samples use them (matrixMulDrv, vectorAddDrv, the
// NVRTC samples): cuCtxCreate, a module loaded from PTX into it, memory and a launch, the
// context pushed on a second thread and popped, flags and ids, cuCtxDestroy; the profiler
// switches. No runtime-API calls.
#include <cuda.h>
#include <cudaProfiler.h>

#include <thread>
#include <vector>

#include "driver_kernels_ptx.h"  // generated: static const char kDriverKernelsPtx[]
#include "gpu_test_common.h"      // CU_CHECK, expect, finish

// iota_u64 through `fn` on the current context; true if every element is right.
static bool iota(CUfunction fn, unsigned long long base, int n) {
  CUdeviceptr d = 0;
  CU_CHECK(cuMemAlloc(&d, n * sizeof(unsigned long long)));
  unsigned int step = 3;
  void* params[] = {&d, &base, &n, &step};
  CU_CHECK(cuLaunchKernel(fn, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr));
  CU_CHECK(cuCtxSynchronize());
  std::vector<unsigned long long> h(n);
  CU_CHECK(cuMemcpyDtoH(h.data(), d, n * sizeof(unsigned long long)));
  CU_CHECK(cuMemFree(d));
  for (int i = 0; i < n; ++i) {
    if (h[i] != base + static_cast<unsigned long long>(i) * step) return false;
  }
  return true;
}

int main() {
  if (cuInit(0) != CUDA_SUCCESS) {
    std::printf("SKIP: cuInit failed (no GPU visible)\n");
    return 77;
  }
  CUdevice dev = 0;
  CU_CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr, current = nullptr;
  CU_CHECK(cuCtxCreate(&ctx, nullptr, CU_CTX_SCHED_BLOCKING_SYNC, dev));
  CU_CHECK(cuCtxGetCurrent(&current));
  expect(current == ctx, "cuCtxCreate makes the new context current");
  unsigned int flags = 0;
  CU_CHECK(cuCtxGetFlags(&flags));
  expect((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC, "cuCtxGetFlags returns the creation flags");
  CUdevice ctxDev = -1;
  CU_CHECK(cuCtxGetDevice(&ctxDev));
  expect(ctxDev == dev, "cuCtxGetDevice names the context's device");
  CU_CHECK(cuProfilerStart());

  CUmodule module = nullptr;
  CU_CHECK(cuModuleLoadData(&module, kDriverKernelsPtx));
  CUfunction fn = nullptr;
  CU_CHECK(cuModuleGetFunction(&fn, module, "iota_u64"));
  expect(iota(fn, 1000, 4096), "a kernel of a module loaded into the context runs");

  // cuMemcpy2D (the driver samples' pitched copies): a 3-row block of a pitched allocation to a
  // host buffer of another pitch, at an offset.
  {
    CUdeviceptr pitched = 0;
    size_t pitch = 0;
    CU_CHECK(cuMemAllocPitch(&pitched, &pitch, 256, 4, 4));
    CU_CHECK(cuMemsetD2D32(pitched, pitch, 0x01020304u, 64, 4));
    std::vector<unsigned int> host(8 * 16, 0);
    CUDA_MEMCPY2D p{};
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = pitched;
    p.srcPitch = pitch;
    p.srcY = 1;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = host.data();
    p.dstPitch = 16 * sizeof(unsigned int);
    p.dstXInBytes = 2 * sizeof(unsigned int);
    p.WidthInBytes = 8 * sizeof(unsigned int);
    p.Height = 3;
    CU_CHECK(cuMemcpy2D(&p));
    bool ok = true;
    for (int row = 0; row < 8; ++row) {
      for (int col = 0; col < 16; ++col) {
        bool copied = row < 3 && col >= 2 && col < 10;
        ok = ok && host[row * 16 + col] == (copied ? 0x01020304u : 0u);
      }
    }
    expect(ok, "cuMemcpy2D copies a pitched block to an offset");
    CU_CHECK(cuMemFree(pitched));
  }

  // Another thread: pops nothing of ours, pushes the context, works in it, pops it.
  CU_CHECK(cuCtxPopCurrent(&current));
  expect(current == ctx, "cuCtxPopCurrent returns the created context");
  bool threadOk = false;
  std::thread worker([&] {
    CU_CHECK(cuCtxPushCurrent(ctx));
    threadOk = iota(fn, 7, 1000);
    CUcontext popped = nullptr;
    CU_CHECK(cuCtxPopCurrent(&popped));
    threadOk = threadOk && popped == ctx;
  });
  worker.join();
  expect(threadOk, "a second thread pushes the context and launches in it");
  CU_CHECK(cuCtxPushCurrent(ctx));
  unsigned long long id = 0, primaryId = 0;
  CUcontext primary = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
  CU_CHECK(cuCtxGetId(ctx, &id));
  CU_CHECK(cuCtxGetId(primary, &primaryId));
  expect(id != primaryId, "the created and the primary context have different ids");
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));

  CU_CHECK(cuProfilerStop());
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuCtxDestroy(ctx));
  // What a destroyed handle does when used again is undefined natively (the driver does not
  // refuse cuCtxPushCurrent of it), so only what cuCtxDestroy promises is checked: the context,
  // current on this thread, is popped from the thread's stack.
  CU_CHECK(cuCtxGetCurrent(&current));
  expect(current != ctx, "cuCtxDestroy pops the destroyed context");
  return finish("driver_contexts");
}
