#include "server/transform/cache/compile_ptx.h"

#include <nvJitLink.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace tally::server::transform {
namespace {

std::string resultText(nvJitLinkResult r) {
  switch (r) {
    case NVJITLINK_SUCCESS: return "success";
    case NVJITLINK_ERROR_UNRECOGNIZED_OPTION: return "unrecognized option";
    case NVJITLINK_ERROR_MISSING_ARCH: return "missing -arch";
    case NVJITLINK_ERROR_INVALID_INPUT: return "invalid input";
    case NVJITLINK_ERROR_PTX_COMPILE: return "PTX compile error";
    case NVJITLINK_ERROR_NVVM_COMPILE: return "NVVM compile error";
    case NVJITLINK_ERROR_INTERNAL: return "internal error";
    case NVJITLINK_ERROR_UNRECOGNIZED_INPUT: return "unrecognized input";
    case NVJITLINK_ERROR_INCORRECT_INPUT_TYPE: return "input is not PTX";
    case NVJITLINK_ERROR_ARCH_MISMATCH: return "arch mismatch";
    case NVJITLINK_ERROR_UNRECOGNIZED_ARCH: return "unrecognized -arch";
    case NVJITLINK_ERROR_UNSUPPORTED_ARCH: return "unsupported -arch";
    default: return "error " + std::to_string(static_cast<int>(r));
  }
}

std::string errorLog(nvJitLinkHandle h) {
  size_t size = 0;
  if (nvJitLinkGetErrorLogSize(h, &size) != NVJITLINK_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvJitLinkGetErrorLog(h, log.data()) != NVJITLINK_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string infoLog(nvJitLinkHandle h) {
  size_t size = 0;
  if (nvJitLinkGetInfoLogSize(h, &size) != NVJITLINK_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvJitLinkGetInfoLog(h, log.data()) != NVJITLINK_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

struct Handle {
  nvJitLinkHandle h = nullptr;
  ~Handle() {
    if (h != nullptr) nvJitLinkDestroy(&h);
  }
};

std::optional<std::string> compileWithNvJitLink(std::string_view ptx, std::string_view arch, std::string& log) {
  const std::string archOption = "-arch=" + std::string(arch);
  const char* options[] = {archOption.c_str()};
  Handle handle;
  nvJitLinkResult r = nvJitLinkCreate(&handle.h, 1, options);
  if (r != NVJITLINK_SUCCESS) {
    log = "nvJitLinkCreate(" + archOption + ") failed: " + resultText(r);
    handle.h = nullptr;
    return std::nullopt;
  }
  // nvJitLink reads PTX as a C string: pass a NUL-terminated copy.
  std::string text(ptx);
  r = nvJitLinkAddData(handle.h, NVJITLINK_INPUT_PTX, text.c_str(), text.size() + 1, "tally_variant.ptx");
  if (r != NVJITLINK_SUCCESS) {
    log = "nvJitLinkAddData failed: " + resultText(r);
    if (std::string e = errorLog(handle.h); !e.empty()) log += "\n" + e;
    return std::nullopt;
  }
  r = nvJitLinkComplete(handle.h);
  if (r != NVJITLINK_SUCCESS) {
    log = "nvJitLinkComplete failed: " + resultText(r);
    if (std::string e = errorLog(handle.h); !e.empty()) log += "\n" + e;
    return std::nullopt;
  }
  size_t size = 0;
  r = nvJitLinkGetLinkedCubinSize(handle.h, &size);
  if (r != NVJITLINK_SUCCESS || size == 0) {
    log = "nvJitLinkGetLinkedCubinSize failed: " + resultText(r);
    return std::nullopt;
  }
  std::string cubin(size, '\0');
  r = nvJitLinkGetLinkedCubin(handle.h, cubin.data());
  if (r != NVJITLINK_SUCCESS) {
    log = "nvJitLinkGetLinkedCubin failed: " + resultText(r);
    return std::nullopt;
  }
  log = infoLog(handle.h);
  return cubin;
}

std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `ptxas -arch=<arch> in.ptx -o out.cubin` in a scratch directory; its output goes to `log`.
std::optional<std::string> compileWithPtxas(const std::string& ptxas, std::string_view ptx, std::string_view arch,
                                            std::string& log) {
  std::string pattern = (std::filesystem::temp_directory_path() / "tally-ptxas-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    log = "ptxas: no scratch directory";
    return std::nullopt;
  }
  const std::filesystem::path dir = pattern;
  std::ofstream(dir / "in.ptx", std::ios::binary) << ptx;
  std::vector<std::string> args = {ptxas, "-arch=" + std::string(arch), (dir / "in.ptx").string(), "-o",
                                   (dir / "out.cubin").string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  const std::string output = (dir / "ptxas.log").string();
  posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&files, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  int status = 0;
  const int spawned = posix_spawn(&pid, ptxas.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  const bool ran = spawned == 0 && waitpid(pid, &status, 0) == pid;
  const bool compiled = ran && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::string cubin = compiled ? readFile(dir / "out.cubin") : std::string();
  log = ran ? readFile(output) : ptxas + ": cannot run it";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (cubin.empty()) return std::nullopt;
  return cubin;
}

// The toolkit's ptxas when the host has one (TALLY_PTXAS names another; set empty: none).
std::string ptxasPath() {
  if (const char* chosen = std::getenv("TALLY_PTXAS")) return chosen;
  const char* standard = "/usr/local/cuda/bin/ptxas";
  return access(standard, X_OK) == 0 ? standard : "";
}

}  // namespace

std::optional<std::string> compilePtx(std::string_view ptx, std::string_view arch, std::string& log) {
  log.clear();
  if (ptx.empty()) {
    log = "compilePtx: empty PTX";
    return std::nullopt;
  }
  // ptxas compiles one module as a whole program, as nvcc and the driver's JIT do. nvJitLink
  // compiles relocatable code for linking, which can cost registers: a row reduction of the
  // isolation benchmark took 24 instead of 14, and HP requests ran 17 % slower on the H200.
  if (const std::string ptxas = ptxasPath(); !ptxas.empty()) {
    std::string ptxasLog;
    if (auto cubin = compileWithPtxas(ptxas, ptx, arch, ptxasLog)) {
      log = ptxasLog;
      return cubin;
    }
    log = ptxasLog + "\n";
  }
  std::string linkLog;
  std::optional<std::string> cubin = compileWithNvJitLink(ptx, arch, linkLog);
  log += linkLog;
  return cubin;
}

}  // namespace tally::server::transform
