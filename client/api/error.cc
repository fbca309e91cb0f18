// Errors: per-thread last error, and error strings. The real libcudart that the application
// links still provides pure functions (error strings need no driver), so we use its text
// when it is loaded, and the generated enum names otherwise.
#include "client/api/api_util.h"
#include "client/entry/not_supported.h"

#include <dlfcn.h>

using namespace tally::client;

namespace {

template <typename Fn>
Fn nextDefinition(const char* name) {
  return reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, name));
}

}  // namespace

TALLY_API cudaError_t cudaGetLastError() {
  ThreadState& t = threadState();
  cudaError_t e = t.lastError;
  t.lastError = cudaSuccess;
  return e;
}

TALLY_API cudaError_t cudaPeekAtLastError() { return threadState().lastError; }

TALLY_API const char* cudaGetErrorName(cudaError_t error) {
  static auto real = nextDefinition<const char* (*)(cudaError_t)>("cudaGetErrorName");
  if (real != nullptr) return real(error);
  const char* name = runtimeErrorName(error);
  return name != nullptr ? name : "cudaErrorUnknown";
}

TALLY_API const char* cudaGetErrorString(cudaError_t error) {
  static auto real = nextDefinition<const char* (*)(cudaError_t)>("cudaGetErrorString");
  if (real != nullptr) return real(error);
  const char* name = runtimeErrorName(error);
  return name != nullptr ? name : "unrecognized error code";
}

TALLY_API CUresult cuGetErrorName(CUresult error, const char** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = driverErrorName(error);
  return *out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TALLY_API CUresult cuGetErrorString(CUresult error, const char** out) { return cuGetErrorName(error, out); }
