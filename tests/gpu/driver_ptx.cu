// 10. Driver API only: JIT-load embedded PTX text (generated at build time by
//     `nvcc -ptx` from ptx_src/driver_kernels.cu) with cuModuleLoadData and
//     cuLibraryLoadData; cuModuleGetFunction, cuFuncGetParamInfo,
//     cuModuleGetGlobal, cuMemAlloc/cuMemcpyHtoD/cuLaunchKernel/
//     cuCtxSynchronize/cuMemcpyDtoH, and cuLibraryGetKernel launched through
//     cuLaunchKernel((CUfunction)kernel). No runtime-API calls.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "driver_kernels_ptx.h"  // generated: static const char kDriverKernelsPtx[]
#include "gpu_test_common.h"      // CU_CHECK, expect, finish (no runtime-API calls among them)

static uint64_t next_rand(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Launches scale_add through `fn` and checks the result.
static bool run_scale_add(CUfunction fn, CUstream stream, int n, float a, double b, uint64_t seed,
                          const char* label) {
  std::vector<float> in(n), out(n, 0.0f);
  uint64_t s = seed;
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(static_cast<int>(next_rand(s) % 20001) - 10000) / 64.0f;
  CUdeviceptr d_in = 0, d_out = 0;
  CU_CHECK(cuMemAlloc(&d_in, sizeof(float) * n));
  CU_CHECK(cuMemAlloc(&d_out, sizeof(float) * n));
  CU_CHECK(cuMemcpyHtoD(d_in, in.data(), sizeof(float) * n));
  void* params[] = {&d_out, &d_in, &a, &n, &b};
  unsigned int grid = static_cast<unsigned int>((n + 255) / 256);
  CU_CHECK(cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, stream, params, nullptr));
  if (stream) {
    CU_CHECK(cuStreamSynchronize(stream));
  } else {
    CU_CHECK(cuCtxSynchronize());
  }
  CU_CHECK(cuMemcpyDtoH(out.data(), d_out, sizeof(float) * n));
  int bad = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    float want = static_cast<float>(static_cast<double>(in[i] * a) + b);
    if (out[i] != want) ++bad;
    sum += out[i];
  }
  std::printf("%s: n=%d sum=%.4f out[0]=%.6f out[n-1]=%.6f bad=%d\n", label, n, sum, out[0],
              out[n - 1], bad);
  CU_CHECK(cuMemFree(d_in));
  CU_CHECK(cuMemFree(d_out));
  return bad == 0;
}

int main() {
  CU_CHECK(cuInit(0));
  int drv = 0;
  CU_CHECK(cuDriverGetVersion(&drv));
  std::printf("driver version >= 12040: %s\n", drv >= 12040 ? "yes" : "no");
  int count = 0;
  CU_CHECK(cuDeviceGetCount(&count));
  std::printf("device count >= 1: %s\n", count >= 1 ? "yes" : "no");
  CUdevice dev;
  CU_CHECK(cuDeviceGet(&dev, 0));
  char name[256] = {0};
  CU_CHECK(cuDeviceGetName(name, sizeof name, dev));
  int major = 0, minor = 0, sms = 0;
  CU_CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  CU_CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  std::printf("device 0: %s cc %d.%d SMs %d\n", name, major, minor, sms);

  CUcontext ctx = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_CHECK(cuCtxSetCurrent(ctx));
  CUcontext cur = nullptr;
  CU_CHECK(cuCtxGetCurrent(&cur));
  expect(cur == ctx, "cuCtxGetCurrent returns the primary context");
  CUdevice cdev = -1;
  CU_CHECK(cuCtxGetDevice(&cdev));
  expect(cdev == dev, "cuCtxGetDevice");

  std::printf("embedded PTX: %zu bytes, has .entry scale_add: %s\n", std::strlen(kDriverKernelsPtx),
              std::strstr(kDriverKernelsPtx, ".entry scale_add") ? "yes" : "no");

  // ---- module path ----
  CUmodule mod = nullptr;
  CU_CHECK(cuModuleLoadData(&mod, kDriverKernelsPtx));
  CUfunction f_scale = nullptr, f_iota = nullptr, f_count = nullptr;
  CU_CHECK(cuModuleGetFunction(&f_scale, mod, "scale_add"));
  CU_CHECK(cuModuleGetFunction(&f_iota, mod, "iota_u64"));
  CU_CHECK(cuModuleGetFunction(&f_count, mod, "count_hits"));
  CUfunction f_missing = nullptr;
  CUresult r = cuModuleGetFunction(&f_missing, mod, "no_such_kernel");
  std::printf("cuModuleGetFunction(no_such_kernel) -> %s\n", cu_err_name(r));
  expect(r == CUDA_ERROR_NOT_FOUND, "missing kernel -> CUDA_ERROR_NOT_FOUND");

  // Parameter layout of scale_add(float*, const float*, float, int, double).
  const size_t want_off[] = {0, 8, 16, 20, 24};
  const size_t want_size[] = {8, 8, 4, 4, 8};
  bool layout_ok = true;
  size_t idx = 0;
  for (;; ++idx) {
    size_t off = 0, sz = 0;
    r = cuFuncGetParamInfo(f_scale, idx, &off, &sz);
    if (r != CUDA_SUCCESS) break;
    std::printf("scale_add param %zu: offset=%zu size=%zu\n", idx, off, sz);
    if (idx >= 5 || off != want_off[idx] || sz != want_size[idx]) layout_ok = false;
  }
  std::printf("cuFuncGetParamInfo(index %zu) -> %s\n", idx, cu_err_name(r));
  expect(layout_ok && idx == 5 && r == CUDA_ERROR_INVALID_VALUE, "cuFuncGetParamInfo layout");

  int regs = -1, max_threads = -1;
  CU_CHECK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f_scale));
  CU_CHECK(cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f_scale));
  std::printf("scale_add: regs>0=%d maxThreadsPerBlock=%d\n", regs > 0 ? 1 : 0, max_threads);

  expect(run_scale_add(f_scale, nullptr, 100003, 1.5f, -0.25, 10, "module scale_add"),
         "module kernel via cuLaunchKernel(kernelParams)");

  // iota_u64 through the `extra` parameter-buffer form of cuLaunchKernel.
  {
    const int n = 50000;
    CUdeviceptr d = 0;
    CU_CHECK(cuMemAlloc(&d, sizeof(unsigned long long) * n));
    CU_CHECK(cuMemsetD8(d, 0xEE, sizeof(unsigned long long) * n));
    struct {
      CUdeviceptr out;             // offset 0
      unsigned long long base;     // offset 8
      int n;                       // offset 16
      unsigned int step;           // offset 20
    } buf = {d, 0x100000000ull + 5, n, 3};
    size_t buf_size = sizeof buf;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size,
                     CU_LAUNCH_PARAM_END};
    CU_CHECK(cuLaunchKernel(f_iota, (n + 127) / 128, 1, 1, 128, 1, 1, 0, nullptr, nullptr, extra));
    CU_CHECK(cuCtxSynchronize());
    std::vector<unsigned long long> h(n);
    CU_CHECK(cuMemcpyDtoH(h.data(), d, sizeof(unsigned long long) * n));
    int bad = 0;
    for (int i = 0; i < n; ++i)
      if (h[i] != buf.base + static_cast<unsigned long long>(i) * 3) ++bad;
    std::printf("iota_u64 via extra: last=%llu bad=%d\n", h[n - 1], bad);
    expect(bad == 0, "cuLaunchKernel with CU_LAUNCH_PARAM_BUFFER_POINTER");
    CU_CHECK(cuMemFree(d));
  }

  // Module global: cuModuleGetGlobal + memset + kernel atomics.
  {
    CUdeviceptr g = 0;
    size_t gsize = 0;
    CU_CHECK(cuModuleGetGlobal(&g, &gsize, mod, "dev_counter"));
    std::printf("dev_counter size=%zu\n", gsize);
    CU_CHECK(cuMemsetD32(g, 0, 1));
    const int n = 77777;
    std::vector<int> h(n);
    uint64_t s = 99;
    int want = 0;
    for (int i = 0; i < n; ++i) {
      h[i] = static_cast<int>(next_rand(s) % 1000);
      if (h[i] > 600) ++want;
    }
    CUdeviceptr d = 0;
    CU_CHECK(cuMemAlloc(&d, sizeof(int) * n));
    CU_CHECK(cuMemcpyHtoD(d, h.data(), sizeof(int) * n));
    int nn = n, thr = 600;
    void* params[] = {&d, &nn, &thr};
    CU_CHECK(cuLaunchKernel(f_count, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
    CU_CHECK(cuCtxSynchronize());
    int got = -1;
    CU_CHECK(cuMemcpyDtoH(&got, g, sizeof(int)));
    std::printf("count_hits: %d (host %d)\n", got, want);
    expect(gsize == sizeof(int) && got == want, "cuModuleGetGlobal + atomics");
    CU_CHECK(cuMemFree(d));
  }

  // A stream and async copies.
  {
    CUstream st = nullptr;
    CU_CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    expect(run_scale_add(f_scale, st, 4097, -2.0f, 1.0, 11, "module scale_add on stream"),
           "module kernel on a CUstream");
    const int n = 1000;
    std::vector<int> a(n), b(n, 0);
    for (int i = 0; i < n; ++i) a[i] = i * i - 77;
    CUdeviceptr d = 0;
    CU_CHECK(cuMemAlloc(&d, sizeof(int) * n));
    CU_CHECK(cuMemcpyHtoDAsync(d, a.data(), sizeof(int) * n, st));
    CU_CHECK(cuMemcpyDtoHAsync(b.data(), d, sizeof(int) * n, st));
    CU_CHECK(cuStreamSynchronize(st));
    expect(a == b, "cuMemcpyHtoDAsync/DtoHAsync round trip");
    CU_CHECK(cuMemFree(d));
    CU_CHECK(cuStreamDestroy(st));
  }
  CU_CHECK(cuModuleUnload(mod));

  // ---- library path ----
  CUlibrary lib = nullptr;
  CU_CHECK(cuLibraryLoadData(&lib, kDriverKernelsPtx, nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel k_scale = nullptr;
  CU_CHECK(cuLibraryGetKernel(&k_scale, lib, "scale_add"));
  expect(run_scale_add(reinterpret_cast<CUfunction>(k_scale), nullptr, 65536 + 3, 0.75f, 2.5, 12,
                       "library kernel as CUfunction"),
         "cuLaunchKernel((CUfunction)CUkernel)");
  CUfunction f_from_kernel = nullptr;
  CU_CHECK(cuKernelGetFunction(&f_from_kernel, k_scale));
  expect(run_scale_add(f_from_kernel, nullptr, 1000, 3.0f, 0.5, 13, "cuKernelGetFunction"),
         "cuKernelGetFunction launch");
  CUkernel k_missing = nullptr;
  r = cuLibraryGetKernel(&k_missing, lib, "no_such_kernel");
  std::printf("cuLibraryGetKernel(no_such_kernel) -> %s\n", cu_err_name(r));
  expect(r == CUDA_ERROR_NOT_FOUND, "missing library kernel -> CUDA_ERROR_NOT_FOUND");
  CU_CHECK(cuLibraryUnload(lib));

  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuDevicePrimaryCtxRelease(dev));
  return finish("driver_ptx");
}
