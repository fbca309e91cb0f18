#include "server/transform/cache/compile_ptx.h"

#include <nvJitLink.h>


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

}  // namespace

std::optional<std::string> compilePtx(std::string_view ptx, std::string_view arch, std::string& log) {
  log.clear();
  if (ptx.empty()) {
    log = "compilePtx: empty PTX";
    return std::nullopt;
  }
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

}  // namespace tally::server::transform
