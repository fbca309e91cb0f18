// CUDA_VISIBLE_DEVICES as the application sees it: the program runs itself again with the
// variable set to each value below and prints what that child sees (device count and its error,
// what cudaSetDevice says at the edge). Natively the driver applies the variable; through tallyd
// the client sends it and tallyd selects and renumbers its GPUs for the tenant. Written for a
// machine with one GPU: "0" and the GPU's own UUID (and a prefix of it) select it; "" / "5" /
// "MIG-..." / "-1" select none (cudaErrorNoDevice, count 0); the list ends at its first invalid
// or repeated entry ("0,5,0", "0,0": one GPU).
#include "gpu_test_common.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>


__global__ void setOne(int* out) { *out = 1; }

// The child: what CUDA_VISIBLE_DEVICES (already set) gives.
static int child() {
  int count = -1;
  cudaError_t e = cudaGetDeviceCount(&count);
  std::printf("  count %d (%s)\n", count, cudaGetErrorName(e));
  if (e == cudaSuccess && count > 0) {
    EXPECT_ERR(cudaSetDevice(count), cudaErrorInvalidDevice);
    CHECK(cudaSetDevice(0));
    int* d = nullptr;
    int h = 0;
    CHECK(cudaMalloc(&d, sizeof(int)));
    setOne<<<1, 1>>>(d);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaFree(d));
    std::printf("  kernel on device 0: %d\n", h);
  } else {
    int* d = nullptr;
    std::printf("  cudaMalloc -> %s\n", cudaGetErrorName(cudaMalloc(&d, 16)));
  }
  return g_failures == 0 ? 0 : 1;
}

// Device 0's UUID as nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
static std::string fullUuid() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    out += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) out += '-';
  }
  return out;
}

static int runWith(const char* label, const std::string& value) {
  std::printf("CUDA_VISIBLE_DEVICES=%s\n", label);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("CUDA_VISIBLE_DEVICES", value.c_str(), 1);
    execl("/proc/self/exe", "visible_devices", "--child", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (rc != 0) {
    std::printf("  child exit %d\n", rc);
    ++g_failures;
  }
  return rc;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") return child();
  // The UUIDs are read in a child too, so that this process never initializes CUDA before fork.
  std::string full, prefix;
  {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string uuid = fullUuid();
      if (write(fds[1], uuid.data(), uuid.size()) < 0) _exit(1);
      _exit(0);
    }
    close(fds[1]);
    char buffer[128] = {};
    ssize_t n = read(fds[0], buffer, sizeof buffer - 1);
    close(fds[0]);
    waitpid(pid, nullptr, 0);
    full.assign(buffer, n > 0 ? static_cast<size_t>(n) : 0);
    if (full.size() != 40) {
      std::printf("FATAL: no UUID of device 0\n");
      return 1;
    }
    prefix = full.substr(0, 10);  // GPU- and 6 hex digits
  }
  runWith("0", "0");
  runWith("(its UUID)", full);
  runWith("(a prefix of its UUID)", prefix);
  runWith("0,5,0", "0,5,0");
  runWith("0,0", "0,0");
  runWith("(empty)", "");
  runWith("5", "5");
  runWith("-1", "-1");
  runWith("MIG-GPU-x/0/0", "MIG-GPU-x/0/0");
  runWith("5,0", "5,0");
  std::printf("%s\n", g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
