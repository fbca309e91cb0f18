// Whether a lightweight GPU core dump can tell tallyd which kernel faulted (issue #7's blame).
// The driver does not say which stream of a context faulted; a core dump names the faulting
// warp's PC and carries the relocated images, so PC -> function -> the tenant that launched it.
// This probe measures, on the real driver, what turning dumps on costs and changes:
//   - the launch + sync round trip with and without dumps enabled (is there a steady-state cost?);
//   - after a fault beside a bystander's kernel on another stream: when each stream's query turns
//     to an error, what it is, and when the dump file is complete (size stops growing).
// Usage: coredump_probe <illegal|assert> <dump on|off> <dump file pattern> [query|sync] [spin|mem]
//   query|sync: how the faulting stream is watched (polled query, or a blocking sync on a thread);
//   spin|mem:   the bystander spins without touching memory, or keeps reading and writing it.
// Output: one JSON line per observation.
#undef NDEBUG
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

__global__ void emptyKernel() {}

__global__ void bystanderSpin(long long ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > ns) break;
  }
}

__global__ void bystanderMemory(unsigned* buffer, unsigned words, long long ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (unsigned round = 0;; ++round) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < words; i += gridDim.x * blockDim.x) buffer[i] += round;
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > ns) break;
  }
}

__global__ void faultingIllegalStore(int* p) { *reinterpret_cast<volatile int*>(p) = 1; }
__global__ void faultingAssert(int value) { assert(value == 0); }

double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void enableDumps(const char* pattern) {
  cuInit(0);
  bool on = true;
  size_t size = sizeof(on);
  CUresult a = cuCoredumpSetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &on, &size);
  int flags = CU_COREDUMP_LIGHTWEIGHT_FLAGS | CU_COREDUMP_SKIP_ABORT;
  size = sizeof(flags);
  CUresult b = cuCoredumpSetAttributeGlobal(CU_COREDUMP_GENERATION_FLAGS, &flags, &size);
  size = std::strlen(pattern) + 1;
  CUresult c = cuCoredumpSetAttributeGlobal(CU_COREDUMP_FILE, const_cast<char*>(pattern), &size);
  std::printf("{\"what\":\"enable\",\"on_exception\":%d,\"flags\":%d,\"file\":%d}\n", a, b, c);
}

void roundTrips(const char* label) {
  std::vector<double> us;
  for (int i = 0; i < 3000; ++i) {
    auto t0 = Clock::now();
    emptyKernel<<<1, 1>>>();
    cudaDeviceSynchronize();
    if (i >= 500) us.push_back(msSince(t0) * 1000);
  }
  std::sort(us.begin(), us.end());
  std::printf("{\"what\":\"launch_sync_us\",\"dumps\":\"%s\",\"p50\":%.2f,\"p99\":%.2f}\n", label, us[us.size() / 2],
              us[us.size() * 99 / 100]);
}

long long fileSize(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <illegal|assert> <on|off> <dump file pattern>\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  bool dumps = std::string(argv[2]) == "on";
  bool blockingSync = argc > 4 && std::string(argv[4]) == "sync";
  bool memoryBystander = argc > 5 && std::string(argv[5]) == "mem";
  std::string dumpPath = argv[3];
  if (auto pos = dumpPath.find("%p"); pos != std::string::npos) dumpPath.replace(pos, 2, std::to_string(getpid()));
  if (dumps) enableDumps(argv[3]);
  cudaFree(nullptr);
  roundTrips(dumps ? "on" : "off");

  cudaStream_t bystander, faulting;
  cudaStreamCreateWithFlags(&bystander, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&faulting, cudaStreamNonBlocking);
  unsigned* buffer = nullptr;
  constexpr unsigned kWords = 1u << 22;
  cudaMalloc(&buffer, kWords * sizeof(unsigned));
  if (memoryBystander) bystanderMemory<<<66, 256, 0, bystander>>>(buffer, kWords, 30'000'000);
  else bystanderSpin<<<66, 32, 0, bystander>>>(30'000'000);  // 30 ms on half the SMs
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  auto t0 = Clock::now();
  // When the dump file first appears, relative to the faulting launch.
  std::atomic<double> fileSeenAt{-1};
  std::atomic<bool> stopWatching{false};
  std::thread fileWatch([&] {
    while (!stopWatching.load() && msSince(t0) < 8000) {
      if (fileSize(dumpPath) >= 0) {
        fileSeenAt = msSince(t0);
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  if (mode == "illegal") faultingIllegalStore<<<1, 1, 0, faulting>>>(reinterpret_cast<int*>(0x10));
  else faultingAssert<<<1, 1, 0, faulting>>>(1);
  std::atomic<double> syncAt{-1};
  std::atomic<int> syncErr{0};
  std::thread syncThread;
  if (blockingSync) {
    syncThread = std::thread([&] {
      cudaError_t e = cudaStreamSynchronize(faulting);
      syncAt = msSince(t0), syncErr = e;
    });
  }

  double byAt = -1, faAt = -1;
  int byErr = 0, faErr = 0;
  while (msSince(t0) < 5000 && (byAt < 0 || faAt < 0)) {
    if (byAt < 0) {
      cudaError_t e = cudaStreamQuery(bystander);
      if (e != cudaErrorNotReady) byAt = msSince(t0), byErr = e;
    }
    if (faAt < 0 && blockingSync) {
      if (syncAt.load() >= 0) faAt = syncAt.load(), faErr = syncErr.load();
    } else if (faAt < 0) {
      cudaError_t e = cudaStreamQuery(faulting);
      if (e != cudaErrorNotReady) faAt = msSince(t0), faErr = e;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  std::printf("{\"what\":\"fault\",\"mode\":\"%s\",\"dumps\":%d,\"watch\":\"%s\",\"bystander\":\"%s\","
              "\"bystander_ms\":%.3f,\"bystander_err\":%d,\"faulting_ms\":%.3f,\"faulting_err\":%d}\n",
              mode.c_str(), dumps, blockingSync ? "sync" : "query", memoryBystander ? "mem" : "spin", byAt, byErr, faAt,
              faErr);
  // The error may surface later with dumps on: watch a context-wide query for up to 5 s.
  double ctxAt = -1;
  int ctxErr = 0;
  while (msSince(t0) < 8000) {
    size_t v = 0;
    CUresult r = cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE);
    if (r != CUDA_SUCCESS) {
      ctxAt = msSince(t0), ctxErr = r;
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::printf("{\"what\":\"context_error\",\"mode\":\"%s\",\"dumps\":%d,\"at_ms\":%.3f,\"err\":%d}\n", mode.c_str(),
              dumps, ctxAt, ctxErr);
  if (syncThread.joinable()) syncThread.join();
  stopWatching = true;
  fileWatch.join();
  if (dumps) {
    const std::string& pattern = dumpPath;
    long long last = -2;
    double stableAt = -1;
    while (msSince(t0) < 15000) {
      long long s = fileSize(pattern);
      if (s > 0 && s == last) {
        stableAt = msSince(t0);
        break;
      }
      last = s;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::printf("{\"what\":\"dump\",\"mode\":\"%s\",\"file\":\"%s\",\"bytes\":%lld,\"first_seen_ms\":%.2f,"
                "\"stable_ms\":%.1f}\n",
                mode.c_str(), pattern.c_str(), last, fileSeenAt.load(), stableAt);
  }
  std::fflush(stdout);
  return 0;
}
