// 27. Driver JIT linking, as NVIDIA's ptxjit sample: cuLinkCreate with a wall-time output, info
//     and error log buffers and verbose logging; cuLinkAddData of PTX text (generated at build
//     time by `nvcc -ptx` from ptx_src/driver_kernels.cu); cuLinkComplete; cuModuleLoadData of
//     the linked cubin; a launch of scale_add, its result checked; cuLinkDestroy. Then a broken
//     PTX input, whose failure must fill the error log. Prints log sizes, never their text or
//     the wall time, so a native run and one through tallyd compare equal.
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "driver_kernels_ptx.h"  // generated: static const char kDriverKernelsPtx[]
#include "gpu_test_common.h"      // CU_CHECK, expect, finish

namespace {

constexpr unsigned kLogBytes = 8192;

struct LinkLogs {
  float wallTime = 0;
  char info[kLogBytes] = {};
  char error[kLogBytes] = {};
  CUjit_option options[6] = {CU_JIT_WALL_TIME,          CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                             CU_JIT_ERROR_LOG_BUFFER,   CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
  void* values[6] = {};

  LinkLogs() {
    values[0] = &wallTime;  // as ptxjit: the driver overwrites the slot itself
    values[1] = info;
    values[2] = reinterpret_cast<void*>(static_cast<uintptr_t>(kLogBytes));
    values[3] = error;
    values[4] = reinterpret_cast<void*>(static_cast<uintptr_t>(kLogBytes));
    values[5] = reinterpret_cast<void*>(static_cast<uintptr_t>(1));
  }
};

bool launchScaleAdd(CUmodule module) {
  CUfunction fn = nullptr;
  CU_CHECK(cuModuleGetFunction(&fn, module, "scale_add"));
  const int n = 1000;
  float a = 2.0f;
  double b = 0.5;
  std::vector<float> in(n), out(n, 0.0f);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i) / 8.0f;
  CUdeviceptr dIn = 0, dOut = 0;
  CU_CHECK(cuMemAlloc(&dIn, sizeof(float) * n));
  CU_CHECK(cuMemAlloc(&dOut, sizeof(float) * n));
  CU_CHECK(cuMemcpyHtoD(dIn, in.data(), sizeof(float) * n));
  int count = n;
  void* params[] = {&dOut, &dIn, &a, &count, &b};
  CU_CHECK(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  CU_CHECK(cuCtxSynchronize());
  CU_CHECK(cuMemcpyDtoH(out.data(), dOut, sizeof(float) * n));
  int bad = 0;
  for (int i = 0; i < n; ++i) {
    if (out[i] != static_cast<float>(static_cast<double>(in[i] * a) + b)) ++bad;
  }
  std::printf("linked scale_add: n=%d out[1]=%.4f out[n-1]=%.4f bad=%d\n", n, out[1], out[n - 1], bad);
  CU_CHECK(cuMemFree(dIn));
  CU_CHECK(cuMemFree(dOut));
  return bad == 0;
}

bool linkAndRun() {
  LinkLogs logs;
  CUlinkState link = nullptr;
  CU_CHECK(cuLinkCreate(6, logs.options, logs.values, &link));
  CU_CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kDriverKernelsPtx), std::strlen(kDriverKernelsPtx) + 1,
                         "driver_kernels.ptx", 0, nullptr, nullptr));
  void* cubin = nullptr;
  size_t size = 0;
  CU_CHECK(cuLinkComplete(link, &cubin, &size));
  // The log's length depends on the driver's JIT cache (a cached PTX compile writes no ptxas
  // lines: measured on the H200, native run first, then tallyd's hit), so only its content is
  // compared; the whole log goes to stderr.
  std::printf("link complete: image %s, info log names scale_add: %s\n", size > 0 ? "non-empty" : "empty",
              std::strstr(logs.info, "scale_add") != nullptr ? "yes" : "no");
  std::fprintf(stderr, "info log (%zu bytes):\n%s\n", std::strlen(logs.info), logs.info);
  CUmodule module = nullptr;
  CU_CHECK(cuModuleLoadData(&module, cubin));  // the image stays the link's until cuLinkDestroy
  bool ok = launchScaleAdd(module);
  CU_CHECK(cuModuleUnload(module));
  CU_CHECK(cuLinkDestroy(link));
  return ok;
}

bool brokenPtxFillsTheErrorLog() {
  LinkLogs logs;
  CUlinkState link = nullptr;
  CU_CHECK(cuLinkCreate(6, logs.options, logs.values, &link));
  static char broken[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry broken( { not ptx }\n";
  CUresult r = cuLinkAddData(link, CU_JIT_INPUT_PTX, broken, sizeof broken, "broken.ptx", 0, nullptr, nullptr);
  std::printf("broken PTX: %s, error log %s\n", cu_err_name(r), std::strlen(logs.error) > 0 ? "non-empty" : "empty");
  CU_CHECK(cuLinkDestroy(link));
  return r != CUDA_SUCCESS && std::strlen(logs.error) > 0;
}

}  // namespace

int main() {
  CU_CHECK(cuInit(0));
  CUdevice device = 0;
  CU_CHECK(cuDeviceGet(&device, 0));
  CUcontext context = nullptr;
  CU_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  CU_CHECK(cuCtxSetCurrent(context));
  expect(linkAndRun(), "linked kernel computes scale_add");
  expect(brokenPtxFillsTheErrorLog(), "broken PTX fails with an error log");
  expect(cuLinkCreate(0, nullptr, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE, "null state out refused");
  return finish("jit_link");
}
