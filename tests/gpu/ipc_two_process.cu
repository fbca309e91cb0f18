// CUDA IPC between two processes (torch.multiprocessing's pattern). The program forks before any
// CUDA call, so each process has a context of its own natively and a tenant of its own through
// tallyd. The parent allocates and fills memory, records an interprocess event after the kernel,
// and sends both handles down a pipe; the child opens them, waits on the event, checks the
// values, adds to them, and answers with its findings; the parent checks the child's writes.
// Only the parent prints, so the output is deterministic.
// Exits 77 (skip) when no GPU is visible.
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "gpu_test_common.h"

constexpr int kN = 1 << 20;

__global__ void fill(int* p, int n, int base) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    gpu_spin_ns(i == 0 ? 2000000 : 0);  // the child must really wait for the event
    p[i] = base + i;
  }
}

__global__ void add_one(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

struct Handles {
  cudaIpcMemHandle_t memory;
  cudaIpcEventHandle_t event;
};

// What the child found, sent back to the parent to print.
struct ChildReport {
  int openMemory;      // cudaError_t of each step
  int openEvent;
  int valuesBefore;    // 1: the parent's values were there after waiting on the event
  int closeMemory;
};

static bool readAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

static int child(int in, int out) {
  Handles h{};
  if (!readAll(in, &h, sizeof h)) return 3;
  ChildReport report{};
  int* p = nullptr;
  report.openMemory = cudaIpcOpenMemHandle(reinterpret_cast<void**>(&p), h.memory, cudaIpcMemLazyEnablePeerAccess);
  cudaEvent_t ready = nullptr;
  report.openEvent = cudaIpcOpenEventHandle(&ready, h.event);
  if (report.openMemory == cudaSuccess && report.openEvent == cudaSuccess) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamWaitEvent(s, ready, 0);
    std::vector<int> host(kN);
    cudaMemcpyAsync(host.data(), p, kN * sizeof(int), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    bool ok = true;
    for (int i = 0; i < kN; ++i) ok = ok && host[i] == 5 + i;
    report.valuesBefore = ok ? 1 : 0;
    add_one<<<(kN + 255) / 256, 256, 0, s>>>(p, kN);
    cudaStreamSynchronize(s);
    cudaEventDestroy(ready);
    cudaStreamDestroy(s);
    report.closeMemory = cudaIpcCloseMemHandle(p);
  }
  return write(out, &report, sizeof report) == sizeof report ? 0 : 4;
}

static int parent(int out, int in, pid_t pid) {
  int* p = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&p), kN * sizeof(int)));
  cudaEvent_t ready;
  CHECK(cudaEventCreateWithFlags(&ready, cudaEventInterprocess | cudaEventDisableTiming));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  fill<<<(kN + 255) / 256, 256, 0, s>>>(p, kN, 5);
  CHECK_LAUNCH();
  CHECK(cudaEventRecord(ready, s));
  Handles h{};
  CHECK(cudaIpcGetMemHandle(&h.memory, p + 100));  // an interior pointer names its allocation
  CHECK(cudaIpcGetEventHandle(&h.event, ready));
  cudaEvent_t timed;
  CHECK(cudaEventCreate(&timed));
  cudaIpcEventHandle_t refused;
  EXPECT_ERR(cudaIpcGetEventHandle(&refused, timed), cudaErrorInvalidResourceHandle);
  if (write(out, &h, sizeof h) != sizeof h) return 1;
  ChildReport report{};
  bool got = readAll(in, &report, sizeof report);
  int status = 0;
  waitpid(pid, &status, 0);
  expect(got && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ran to the end");
  std::printf("child: cudaIpcOpenMemHandle -> %s\n", cudaGetErrorName(static_cast<cudaError_t>(report.openMemory)));
  std::printf("child: cudaIpcOpenEventHandle -> %s\n", cudaGetErrorName(static_cast<cudaError_t>(report.openEvent)));
  std::printf("child: cudaIpcCloseMemHandle -> %s\n", cudaGetErrorName(static_cast<cudaError_t>(report.closeMemory)));
  expect(report.valuesBefore == 1, "the child saw the parent's values after the event");
  std::vector<int> host(kN);
  CHECK(cudaMemcpy(host.data(), p, kN * sizeof(int), cudaMemcpyDeviceToHost));
  bool ok = true;
  for (int i = 0; i < kN; ++i) ok = ok && host[i] == 6 + i;
  expect(ok, "the parent sees the child's writes");
  CHECK(cudaEventDestroy(timed));
  CHECK(cudaEventDestroy(ready));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(p));
  return finish("ipc_two_process");
}

int main() {
  // The child must not inherit CUDA state: fork before any CUDA call (the parent's first one
  // below checks for a GPU after the fork).
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) return 1;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    _exit(child(down[0], up[1]));
  }
  close(down[0]);
  close(up[1]);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
    std::printf("SKIP: no GPU visible\n");
    close(down[1]);  // the child reads nothing and leaves
    waitpid(pid, nullptr, 0);
    return 77;
  }
  return parent(down[1], up[0], pid);
}
