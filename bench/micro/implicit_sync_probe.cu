// Which driver calls wait for unrelated work of the same context? In tallyd every tenant shares
// one context, so such a call made on one tenant's behalf waits for every other tenant's
// kernels — and deadlocks if one of those kernels waits for this tenant's next call. The
// scheduler's rules (docs/scheduler.md) rely on this table; run it on a new driver.
//
// For each call: a one-block kernel spins on a non-blocking stream until a host-mapped flag is
// set (or 1.5 s pass); the call runs on another thread; if it has not returned after 200 ms it
// waits for the spinning kernel. Output: one JSON line per call.
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

__global__ void spin(const volatile unsigned* release, unsigned long long timeoutNs) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*release != 0) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < timeoutNs);
}

__global__ void noop() {}

const char* kTinyPtx =
    ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry tiny() { ret; }\n";

#define CHECK(x)                                                                    \
  do {                                                                              \
    CUresult r_ = (x);                                                              \
    if (r_ != CUDA_SUCCESS) {                                                       \
      std::fprintf(stderr, "%s failed: %d (line %d)\n", #x, int(r_), __LINE__);     \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Probe {
  const char* name;
  std::function<void()> prepare;  // before the spinner starts (not timed)
  std::function<CUresult()> call;
};

// Runs `p.call` while `spin` holds one SM (and, with `blocker`, while another thread is inside
// that call, itself waiting for the kernel); true if the call waited for the kernel.
bool waitsForOtherStreams(const Probe& p, unsigned* releaseHost, CUstream spinStream, double& millis, CUresult& result,
                          const std::function<CUresult()>& blocker = nullptr) {
  if (p.prepare) p.prepare();
  __atomic_store_n(releaseHost, 0u, __ATOMIC_RELEASE);
  unsigned* releaseDevice = nullptr;
  cudaHostGetDevicePointer(reinterpret_cast<void**>(&releaseDevice), releaseHost, 0);
  spin<<<1, 1, 0, spinStream>>>(releaseDevice, 1500ull * 1000 * 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the kernel is running
  std::thread blocking;
  if (blocker) {
    blocking = std::thread([&] { blocker(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // it is waiting inside the driver
  }
  std::atomic<bool> done{false};
  auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    result = p.call();
    done = true;
  });
  while (!done && std::chrono::steady_clock::now() - start < std::chrono::milliseconds(200)) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  bool waited = !done;
  __atomic_store_n(releaseHost, 1u, __ATOMIC_RELEASE);
  t.join();
  if (blocking.joinable()) blocking.join();
  millis = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  cuStreamSynchronize(spinStream);
  return waited;
}

struct VmmRange {
  CUdeviceptr address = 0;
  size_t size = 2 << 20;
  CUmemGenericAllocationHandle handle = 0;
};

CUresult vmmMap(VmmRange& v) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  if (CUresult r = cuMemAddressReserve(&v.address, v.size, 0, 0, 0); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuMemCreate(&v.handle, v.size, &prop, 0); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuMemMap(v.address, v.size, 0, v.handle, 0); r != CUDA_SUCCESS) return r;
  CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  return cuMemSetAccess(v.address, v.size, &access, 1);
}

CUresult vmmUnmap(VmmRange& v) {
  if (CUresult r = cuMemUnmap(v.address, v.size); r != CUDA_SUCCESS) return r;
  if (CUresult r = cuMemRelease(v.handle); r != CUDA_SUCCESS) return r;
  return cuMemAddressFree(v.address, v.size);
}

// The tiny PTX compiled to SASS, as tallyd receives most images (fatbins with SASS for sm_90).
void linkCubin(std::vector<char>& out) {
  CUlinkState link = nullptr;
  CHECK(cuLinkCreate(0, nullptr, nullptr, &link));
  CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, const_cast<char*>(kTinyPtx), std::strlen(kTinyPtx) + 1, "tiny", 0,
                      nullptr, nullptr));
  void* image = nullptr;
  size_t size = 0;
  CHECK(cuLinkComplete(link, &image, &size));
  out.assign(static_cast<char*>(image), static_cast<char*>(image) + size);
  CHECK(cuLinkDestroy(link));
}

// Does a stream-ordered free of cuMemAlloc memory give the memory back? (cuMemGetInfo before
// and after, no context-wide sync in between.)
void printFreeAsyncReturnsMemory(CUstream stream) {
  size_t before = 0, during = 0, after = 0, total = 0;
  CUdeviceptr p = 0;
  CHECK(cuMemGetInfo(&before, &total));
  CHECK(cuMemAlloc(&p, size_t(4) << 30));
  CHECK(cuMemGetInfo(&during, &total));
  CHECK(cuMemFreeAsync(p, stream));
  CHECK(cuStreamSynchronize(stream));
  CHECK(cuMemGetInfo(&after, &total));
  std::printf("{\"check\": \"cuMemFreeAsync of a 4 GiB cuMemAlloc returns it\", \"free_mib_before\": %zu, "
              "\"free_mib_allocated\": %zu, \"free_mib_after\": %zu}\n",
              before >> 20, during >> 20, after >> 20);
}

}  // namespace

int main() {
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    std::printf("SKIP: no GPU visible\n");
    return 77;
  }
  CUcontext ctx = nullptr;
  CHECK(cuCtxGetCurrent(&ctx));
  unsigned* release = nullptr;
  cudaHostAlloc(reinterpret_cast<void**>(&release), sizeof(unsigned), cudaHostAllocMapped);
  CUstream spinStream = nullptr, other = nullptr;
  CHECK(cuStreamCreate(&spinStream, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  noop<<<1, 1, 0, other>>>();  // load this module's kernels before probing
  CHECK(cuCtxSynchronize());

  // State the calls work on, made before the spinner runs.
  CUdeviceptr devSmall = 0, devBig = 0;
  void* pinned = nullptr;
  std::vector<char> pageable(1 << 20), registered(1 << 20);
  CUstream idleStream = nullptr;
  CUevent idleEvent = nullptr;
  CUmodule module = nullptr;
  CUfunction tiny = nullptr;
  CUlibrary library = nullptr;
  CUdeviceptr poolPtr = 0;
  CUmemoryPool pool = nullptr;
  CUmemPoolProps poolProps = {};
  poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CHECK(cuMemPoolCreate(&pool, &poolProps));
  cuuint64_t keepAll = ~cuuint64_t(0);
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keepAll));
  VmmRange vmm;
  std::vector<char> cubin;
  CUmodule cubinModule = nullptr;

  auto onThread = [ctx](auto f) {
    return [ctx, f]() -> CUresult {
      cuCtxSetCurrent(ctx);
      return f();
    };
  };
  std::vector<Probe> probes = {
      {"cuStreamCreateWithPriority", nullptr, onThread([&] { return cuStreamCreateWithPriority(&idleStream, CU_STREAM_NON_BLOCKING, 0); })},
      {"cuStreamDestroy (idle stream)", nullptr, onThread([&] { return cuStreamDestroy(idleStream); })},
      {"cuEventCreate", nullptr, onThread([&] { return cuEventCreate(&idleEvent, CU_EVENT_DISABLE_TIMING); })},
      {"cuEventDestroy", nullptr, onThread([&] { return cuEventDestroy(idleEvent); })},
      {"cuMemAlloc 256 B", nullptr, onThread([&] { return cuMemAlloc(&devSmall, 256); })},
      {"cuMemFree 256 B", nullptr, onThread([&] { return cuMemFree(devSmall); })},
      {"cuMemAlloc 1 GiB", nullptr, onThread([&] { return cuMemAlloc(&devBig, size_t(1) << 30); })},
      {"cuMemFree 1 GiB", nullptr, onThread([&] { return cuMemFree(devBig); })},
      {"cuMemHostAlloc 4 KiB", nullptr, onThread([&] { return cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE); })},
      {"cuMemFreeHost 4 KiB", nullptr, onThread([&] { return cuMemFreeHost(pinned); })},
      {"cuMemHostRegister 1 MiB", nullptr, onThread([&] { return cuMemHostRegister(registered.data(), registered.size(), CU_MEMHOSTREGISTER_PORTABLE); })},
      {"cuMemHostUnregister 1 MiB", nullptr, onThread([&] { return cuMemHostUnregister(registered.data()); })},
      {"cuModuleLoadData (PTX)", nullptr, onThread([&] { return cuModuleLoadData(&module, kTinyPtx); })},
      {"cuModuleGetFunction", nullptr, onThread([&] { return cuModuleGetFunction(&tiny, module, "tiny"); })},
      {"cuLaunchKernel (other stream)", nullptr, onThread([&] { return cuLaunchKernel(tiny, 1, 1, 1, 1, 1, 1, 0, other, nullptr, nullptr); })},
      {"cuModuleUnload", [&] { cuStreamSynchronize(other); }, onThread([&] { return cuModuleUnload(module); })},
      {"cuMemcpyHtoDAsync pageable 1 MiB", [&] { cuMemAlloc(&devBig, pageable.size()); },
       onThread([&] { return cuMemcpyHtoDAsync(devBig, pageable.data(), pageable.size(), other); })},
      {"cuMemcpyDtoHAsync pageable 1 MiB", nullptr,
       onThread([&] { return cuMemcpyDtoHAsync(pageable.data(), devBig, pageable.size(), other); })},
      {"cuMemsetD32Async", nullptr, onThread([&] { return cuMemsetD32Async(devBig, 7, 1024, other); })},
      {"cuStreamSynchronize (other stream)", nullptr, onThread([&] { return cuStreamSynchronize(other); })},
      {"cuCtxSetLimit (printf fifo)", nullptr, onThread([&] { return cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 2 << 20); })},
      {"cuCtxSetLimit (stack size)", nullptr, onThread([&] { return cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096); })},
      // Candidates for frees that do not wait for the whole context: the stream-ordered pool
      // and the virtual-memory calls.
      {"cuMemAllocFromPoolAsync 1 MiB + cuStreamSynchronize", nullptr, onThread([&] {
         CUresult r = cuMemAllocFromPoolAsync(&poolPtr, 1 << 20, pool, other);
         return r != CUDA_SUCCESS ? r : cuStreamSynchronize(other);
       })},
      {"cuMemFreeAsync (pool memory) + cuStreamSynchronize", nullptr, onThread([&] {
         CUresult r = cuMemFreeAsync(poolPtr, other);
         return r != CUDA_SUCCESS ? r : cuStreamSynchronize(other);
       })},
      {"cuMemPoolTrimTo 0", nullptr, onThread([&] { return cuMemPoolTrimTo(pool, 0); })},
      {"cuMemFreeAsync (cuMemAlloc memory) + cuStreamSynchronize", [&] { cuMemAlloc(&devSmall, 256); }, onThread([&] {
         CUresult r = cuMemFreeAsync(devSmall, other);
         return r != CUDA_SUCCESS ? r : cuStreamSynchronize(other);
       })},
      {"cuMemCreate + cuMemMap + cuMemSetAccess 2 MiB", nullptr, onThread([&] { return vmmMap(vmm); })},
      {"cuMemUnmap + cuMemRelease + cuMemAddressFree 2 MiB", nullptr, onThread([&] { return vmmUnmap(vmm); })},
      {"cuModuleLoadData (cubin)", [&] { linkCubin(cubin); }, onThread([&] { return cuModuleLoadData(&cubinModule, cubin.data()); })},
      {"cuModuleUnload (cubin)", nullptr, onThread([&] { return cuModuleUnload(cubinModule); })},
      {"cuLibraryLoadData (PTX)", nullptr, onThread([&] { return cuLibraryLoadData(&library, kTinyPtx, nullptr, nullptr, 0, nullptr, nullptr, 0); })},
      {"cuLibraryGetKernel + cuLaunchKernel", nullptr, onThread([&] {
         CUkernel k = nullptr;
         CUresult r = cuLibraryGetKernel(&k, library, "tiny");
         return r != CUDA_SUCCESS ? r : cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 1, 1, 1, 0, other, nullptr, nullptr);
       })},
      {"cuLibraryUnload", [&] { cuStreamSynchronize(other); }, onThread([&] { return cuLibraryUnload(library); })},
  };
  for (const Probe& p : probes) {
    double millis = 0;
    CUresult result = CUDA_SUCCESS;
    bool waited = waitsForOtherStreams(p, release, spinStream, millis, result);
    std::printf("{\"call\": \"%s\", \"waits_for_other_streams\": %s, \"ms\": %.1f, \"result\": %d}\n", p.name,
                waited ? "true" : "false", millis, int(result));
    std::fflush(stdout);
  }

  printFreeAsyncReturnsMemory(other);

  // Second table: calls that do not wait by themselves, made while another thread waits inside
  // cuModuleLoadData for the spinning kernel. If they wait too, one tenant's module load stalls
  // every tenant's calls until the context's running kernels end.
  CUmodule blockerModule = nullptr;
  auto loadWhileSpinning = [&]() -> CUresult {
    cuCtxSetCurrent(ctx);
    CUresult r = cuModuleLoadData(&blockerModule, kTinyPtx);
    if (r == CUDA_SUCCESS) cuModuleUnload(blockerModule);
    return r;
  };
  CUevent doneEvent = nullptr;
  CHECK(cuEventCreate(&doneEvent, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr word = 0;
  CHECK(cuMemAlloc(&word, 4));
  CHECK(cuModuleLoadData(&module, kTinyPtx));
  CHECK(cuModuleGetFunction(&tiny, module, "tiny"));
  std::vector<Probe> behindLoad = {
      {"cuLaunchKernel (other stream)", nullptr, onThread([&] { return cuLaunchKernel(tiny, 1, 1, 1, 1, 1, 1, 0, other, nullptr, nullptr); })},
      {"cuEventRecord", nullptr, onThread([&] { return cuEventRecord(doneEvent, other); })},
      {"cuEventQuery", nullptr, onThread([&] { CUresult r = cuEventQuery(doneEvent); return r == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : r; })},
      {"cuMemcpyHtoDAsync pageable 1 MiB", nullptr, onThread([&] { return cuMemcpyHtoDAsync(devBig, pageable.data(), pageable.size(), other); })},
      {"cuStreamWriteValue32", nullptr, onThread([&] { return cuStreamWriteValue32(other, word, 1, CU_STREAM_WRITE_VALUE_DEFAULT); })},
      {"cuStreamCreateWithPriority", nullptr, onThread([&] { return cuStreamCreateWithPriority(&idleStream, CU_STREAM_NON_BLOCKING, 0); })},
      {"cuMemAlloc 256 B", nullptr, onThread([&] { return cuMemAlloc(&devSmall, 256); })},
  };
  // The same calls while another thread waits inside cuMemFree (a tenant's cudaFree).
  CUdeviceptr blockerMemory = 0;
  auto freeWhileSpinning = [&]() -> CUresult {
    cuCtxSetCurrent(ctx);
    return cuMemFree(blockerMemory);
  };
  struct Blocker {
    const char* name;
    std::function<void()> prepare;
    std::function<CUresult()> wait;
  } blockers[] = {{"cuModuleLoadData", nullptr, loadWhileSpinning},
                  {"cuMemFree", [&] { cuMemAlloc(&blockerMemory, 256); }, freeWhileSpinning}};
  for (const Blocker& b : blockers) {
    for (Probe p : behindLoad) {
      auto own = p.prepare;
      p.prepare = [&, own] {
        if (b.prepare) b.prepare();
        if (own) own();
      };
      double millis = 0;
      CUresult result = CUDA_SUCCESS;
      bool waited = waitsForOtherStreams(p, release, spinStream, millis, result, b.wait);
      std::printf("{\"call\": \"%s\", \"while_another_thread_waits_in\": \"%s\", \"waits_for_other_streams\": %s, \"ms\": %.1f, \"result\": %d}\n",
                  p.name, b.name, waited ? "true" : "false", millis, int(result));
      std::fflush(stdout);
    }
  }
  return 0;
}
