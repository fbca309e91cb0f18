// What the driver does when one kernel of a shared context faults or never ends: the facts
// tallyd's fault recovery (server/gpu/fault_monitor) is built on. Run it on a new driver.
//   A. a kernel asserts while another stream runs a long kernel: what every later query returns,
//      and whether any stream-level result tells the faulting stream apart;
//   B. cuDevicePrimaryCtxReset + retain: how long it takes, and whether the context works after;
//   C. a kernel that never ends: whether a trap kernel on a top-priority stream poisons the
//      context (and so frees threads blocked in syncs), and whether a reset ends the kernel;
//   D. an illegal address inside a green context: is the primary context poisoned too?
// Output: one JSON line per observation.
// Device asserts must fire even in a release build.
#undef NDEBUG
#include <cuda.h>
#include <cuda_runtime.h>

#include <cassert>
#include <chrono>
#include <cstdio>
#include <string_view>
#include <thread>

namespace {

__global__ void assertingKernel(int value) { assert(value == 0); }

const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry badStore(.param .u64 p) {
  .reg .u64 %a;
  ld.param.u64 %a, [p];
  st.global.u32 [%a], 1;
  ret;
}
.visible .entry trapKernel() { trap; }
.visible .entry noop() { ret; }
.visible .entry spin(.param .u64 flag, .param .u64 ns) {
  .reg .u64 %f, %t0, %t1, %d, %lim;
  .reg .u32 %v;
  .reg .pred %p;
  ld.param.u64 %f, [flag];
  ld.param.u64 %lim, [ns];
  mov.u64 %t0, %globaltimer;
LOOP:
  ld.volatile.global.u32 %v, [%f];
  setp.ne.u32 %p, %v, 0;
  @%p bra DONE;
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %lim;
  @%p bra LOOP;
DONE:
  ret;
}
)";

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

const char* name(CUresult r) {
  const char* n = nullptr;
  cuGetErrorName(r, &n);
  return n != nullptr ? n : "?";
}

void report(const char* phase, const char* what, CUresult r, double ms = 0) {
  std::printf("{\"phase\":\"%s\",\"what\":\"%s\",\"result\":\"%s\",\"ms\":%.3f}\n", phase, what, name(r), ms);
  std::fflush(stdout);
}

struct Kernels {
  CUmodule module = nullptr;
  CUfunction badStore = nullptr, trap = nullptr, noop = nullptr, spin = nullptr;
  CUresult load() {
    CUresult r = cuModuleLoadData(&module, kPtx);
    if (r != CUDA_SUCCESS) return r;
    cuModuleGetFunction(&badStore, module, "badStore");
    cuModuleGetFunction(&trap, module, "trapKernel");
    cuModuleGetFunction(&noop, module, "noop");
    return cuModuleGetFunction(&spin, module, "spin");
  }
};

CUresult launchSpin(const Kernels& k, CUstream s, CUdeviceptr flag, unsigned long long ns, unsigned blocks) {
  void* args[] = {&flag, &ns};
  return cuLaunchKernel(k.spin, blocks, 1, 1, 1024, 1, 1, 0, s, args, nullptr);
}

// Every query a fault detector could use, on streams that did and did not run the faulting kernel.
void queryAll(const char* phase, CUstream faulting, CUstream busy, CUstream idle, CUevent doneEarlier) {
  report(phase, "cuStreamQuery(faulting)", cuStreamQuery(faulting));
  report(phase, "cuStreamQuery(busy)", cuStreamQuery(busy));
  report(phase, "cuStreamQuery(idle)", cuStreamQuery(idle));
  report(phase, "cuEventQuery(completed before)", cuEventQuery(doneEarlier));
  size_t value = 0;
  report(phase, "cuCtxGetLimit", cuCtxGetLimit(&value, CU_LIMIT_STACK_SIZE));
  CUdeviceptr p = 0;
  report(phase, "cuMemAlloc", cuMemAlloc(&p, 1 << 20));
  auto t = std::chrono::steady_clock::now();
  CUresult r = cuCtxSynchronize();
  report(phase, "cuCtxSynchronize", r, msSince(t));
}

CUcontext retainPrimary(CUdevice dev) {
  CUcontext ctx = nullptr;
  CUresult r = cuDevicePrimaryCtxRetain(&ctx, dev);
  CUresult set = cuCtxSetCurrent(ctx);
  std::printf("{\"retain\":\"%s\",\"set current\":\"%s\",\"ctx\":\"%p\"}\n", name(r), name(set),
              static_cast<void*>(ctx));
  return ctx;
}

void resetAndCheck(const char* phase, CUdevice dev) {
  auto t = std::chrono::steady_clock::now();
  CUresult r = cuDevicePrimaryCtxReset(dev);
  report(phase, "cuDevicePrimaryCtxReset", r, msSince(t));
  t = std::chrono::steady_clock::now();
  CUcontext before = nullptr;
  cuCtxGetCurrent(&before);
  unsigned flags = 0;
  int active = 0;
  cuDevicePrimaryCtxGetState(dev, &flags, &active);
  std::printf("{\"phase\":\"%s\",\"primary active after reset\":%d}\n", phase, active);
  // A reset leaves the primary context inactive, with no reference: retain it again.
  retainPrimary(dev);
  Kernels k;
  CUresult loaded = k.load();
  report(phase, "module load after reset", loaded, msSince(t));
  CUdeviceptr p = 0;
  report(phase, "cuMemAlloc after reset", cuMemAlloc(&p, 1 << 20));
  if (loaded == CUDA_SUCCESS) {
    report(phase, "launch after reset", cuLaunchKernel(k.noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr));
  }
  report(phase, "cuCtxSynchronize after reset", cuCtxSynchronize(), msSince(t));
}

// An illegal address from a driver-API kernel, no runtime involved, then reset and retain.
void phaseIllegalAddress(CUdevice dev) {
  Kernels k;
  report("A0", "module load", k.load());
  CUdeviceptr bad = 8;
  void* args[] = {&bad};
  report("A0", "launch bad store", cuLaunchKernel(k.badStore, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  report("A0", "cuCtxSynchronize", cuCtxSynchronize());
  resetAndCheck("A0", dev);
}

void phaseAssert(CUdevice dev) {
  Kernels k;
  report("A", "module load", k.load());
  CUstream faulting, busy, idle;
  cuStreamCreate(&faulting, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING);
  CUevent early;
  cuEventCreate(&early, CU_EVENT_DISABLE_TIMING);
  cuEventRecord(early, idle);
  cuStreamSynchronize(idle);
  CUdeviceptr flag = 0;
  cuMemAlloc(&flag, 4);
  cuMemsetD32(flag, 0, 1);
  cuCtxSynchronize();
  launchSpin(k, busy, flag, 300'000'000ull, 8);
  assertingKernel<<<1, 1, 0, faulting>>>(1);
  report("A", "launch asserting kernel", static_cast<CUresult>(cudaGetLastError()));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  queryAll("A", faulting, busy, idle, early);
  resetAndCheck("A", dev);
  (void)dev;
}

// How to end a kernel that never ends. `how`: "trap" (a trapping kernel on a top-priority
// stream), "memop" (a stream memory write to an unmapped address: done by the GPU's front end,
// not an SM), or "none". Then the runaway is released through its flag (a copy-engine memset) if
// the context is still healthy, and the context reset.
void phaseRunaway(CUdevice dev, const char* how) {
  char phase[32];
  std::snprintf(phase, sizeof(phase), "C-%s", how);
  Kernels k;
  report(phase, "module load", k.load());
  int least = 0, greatest = 0;
  cuCtxGetStreamPriorityRange(&least, &greatest);
  CUstream runaway, top;
  cuStreamCreateWithPriority(&runaway, CU_STREAM_NON_BLOCKING, least);
  cuStreamCreateWithPriority(&top, CU_STREAM_NON_BLOCKING, greatest);
  CUdeviceptr flag = 0;
  cuMemAlloc(&flag, 4);
  cuMemsetD32(flag, 0, 1);
  cuCtxSynchronize();
  int sms = 0;
  cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  // Two 1024-thread blocks per SM fill every SM's thread slots: nothing else can start.
  report(phase, "launch runaway", launchSpin(k, runaway, flag, 10'000'000'000ull, 2 * sms));
  CUcontext ctx = nullptr;
  cuCtxGetCurrent(&ctx);
  CUresult waiterResult = CUDA_ERROR_NOT_READY;
  double waiterMs = -1;
  auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    cuCtxSetCurrent(ctx);
    waiterResult = cuStreamSynchronize(runaway);
    waiterMs = msSince(start);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  if (std::string_view(how) == "trap") {
    report(phase, "launch trap on top stream", cuLaunchKernel(k.trap, 1, 1, 1, 1, 1, 1, 0, top, nullptr, nullptr));
  } else if (std::string_view(how) == "memop") {
    report(phase, "cuStreamWriteValue32 to 0x1000 on top stream",
           cuStreamWriteValue32(top, CUdeviceptr(0x1000), 1, CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CUresult q = cuStreamQuery(runaway);
  report(phase, "cuStreamQuery(runaway) 500 ms later", q, msSince(start));
  report(phase, "cuStreamQuery(top) 500 ms later", cuStreamQuery(top), msSince(start));
  if (q == CUDA_ERROR_NOT_READY) {
    report(phase, "release runaway by a memset on top", cuMemsetD32Async(flag, 1, 1, top));
  }
  waiter.join();
  report(phase, "blocked cuStreamSynchronize returned", waiterResult, waiterMs);
  resetAndCheck(phase, dev);
}

void phaseGreen(CUdevice dev) {
  Kernels k;
  report("D", "module load", k.load());
  CUdevResource all{};
  report("D", "cuDeviceGetDevResource", cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource part{}, rest{};
  unsigned groups = 1;
  report("D", "cuDevSmResourceSplitByCount", cuDevSmResourceSplitByCount(&part, &groups, &all, &rest, 0, 16));
  CUdevResourceDesc desc{};
  report("D", "cuDevResourceGenerateDesc", cuDevResourceGenerateDesc(&desc, &part, 1));
  CUgreenCtx green{};
  report("D", "cuGreenCtxCreate", cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUstream gs{}, primary{};
  report("D", "cuGreenCtxStreamCreate", cuGreenCtxStreamCreate(&gs, green, CU_STREAM_NON_BLOCKING, 0));
  cuStreamCreate(&primary, CU_STREAM_NON_BLOCKING);
  CUdeviceptr bad = 8;
  void* args[] = {&bad};
  report("D", "launch bad store in green ctx", cuLaunchKernel(k.badStore, 1, 1, 1, 1, 1, 1, 0, gs, args, nullptr));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  report("D", "cuStreamQuery(green)", cuStreamQuery(gs));
  report("D", "cuStreamQuery(primary)", cuStreamQuery(primary));
  CUdeviceptr p = 0;
  report("D", "cuMemAlloc (primary current)", cuMemAlloc(&p, 1 << 20));
  report("D", "launch noop on primary", cuLaunchKernel(k.noop, 1, 1, 1, 1, 1, 1, 0, primary, nullptr, nullptr));
  report("D", "cuStreamSynchronize(primary)", cuStreamSynchronize(primary));
  resetAndCheck("D", dev);
}

}  // namespace

int main() {
  cuInit(0);
  CUdevice dev = 0;
  cuDeviceGet(&dev, 0);
  retainPrimary(dev);
  phaseIllegalAddress(dev);
  cudaFree(nullptr);  // the runtime adopts the primary context (phase A's asserting kernel)
  phaseAssert(dev);
  {
    CUcontext own = nullptr;
    CUresult r = cuCtxCreate(&own, nullptr, 0, dev);
    report("A-own", "cuCtxCreate after runtime fault + reset", r);
    if (r == CUDA_SUCCESS) {
      Kernels k;
      report("A-own", "module load in own context", k.load());
      report("A-own", "cuCtxDestroy", cuCtxDestroy(own));
    }
    retainPrimary(dev);
  }
  for (const char* how : {"memop", "trap", "none"}) phaseRunaway(dev, how);
  phaseGreen(dev);
  return 0;
}
