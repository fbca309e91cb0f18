// cuBLAS handle lifecycle and the handle state the client mirrors (stream, workspace, math,
// pointer and atomics modes). The client sends a setting only when it changes, so these are
// one-way calls of a few bytes; the BLAS routines themselves are generated.
#include "server/library/library_call.h"
#include "server/session/tenant.h"

#include <cublasLt.h>
#include <cublas_api.h>
#include <spdlog/spdlog.h>

namespace tally::server::library {
namespace {

template <typename Fn>
Fn cublas(const char* name) {
  return resolve<Fn>(Library::kCublas, name);
}

int createReal(void** h) {
  static auto* fn = cublas<decltype(&::cublasCreate_v2)>("cublasCreate_v2");
  return fn != nullptr ? fn(reinterpret_cast<cublasHandle_t*>(h)) : CUBLAS_STATUS_NOT_INITIALIZED;
}
void destroyReal(void* h) {
  static auto* fn = cublas<decltype(&::cublasDestroy_v2)>("cublasDestroy_v2");
  if (fn != nullptr) fn(static_cast<cublasHandle_t>(h));
}
int bindStream(void* h, CUstream s) {
  static auto* fn = cublas<decltype(&::cublasSetStream_v2)>("cublasSetStream_v2");
  return fn != nullptr ? fn(static_cast<cublasHandle_t>(h), reinterpret_cast<cudaStream_t>(s)) : CUBLAS_STATUS_NOT_INITIALIZED;
}
size_t version() {
  static auto* fn = resolve<decltype(&::cublasLtGetVersion)>(Library::kCublasLt, "cublasLtGetVersion");
  return fn != nullptr ? fn() : 0;
}
constexpr HandleOps kHandle{kCublasHandleType, &createReal, &destroyReal, &bindStream, CUBLAS_STATUS_ALLOC_FAILED,
                            &version};

int create(LibraryCall& c) { return createHandle(c, kHandle); }
int destroy(LibraryCall& c) { return destroyHandle(c, kHandle); }
int setStream(LibraryCall& c) { return setHandleStream(c, kHandle); }

int setWorkspace(LibraryCall& c) {
  void* h = c.handle(kCublasHandleType);
  uint64_t address = c.readId();
  uint64_t size = c.readId();
  void* workspace = c.ownedRange(address, size, "workspace");
  if (c.refused()) return c.refusal();
  static auto* fn = cublas<decltype(&::cublasSetWorkspace_v2)>("cublasSetWorkspace_v2");
  if (fn == nullptr) return c.missing();
  return fn(static_cast<cublasHandle_t>(h), workspace, size);
}

// The three "mode" setters share a layout: handle id, the mode as int32.
template <typename Mode, cublasStatus_t (*Real)(cublasHandle_t, Mode)>
int setMode(LibraryCall& c, const char* name) {
  void* h = c.handle(kCublasHandleType);
  auto mode = c.reader().get<int32_t>();
  if (c.refused()) return c.refusal();
  static auto* fn = cublas<decltype(Real)>(name);
  if (fn == nullptr) return c.missing();
  return fn(static_cast<cublasHandle_t>(h), static_cast<Mode>(mode));
}

int setMathMode(LibraryCall& c) { return setMode<cublasMath_t, &::cublasSetMathMode>(c, "cublasSetMathMode"); }
int setPointerMode(LibraryCall& c) {
  return setMode<cublasPointerMode_t, &::cublasSetPointerMode_v2>(c, "cublasSetPointerMode_v2");
}
int setAtomicsMode(LibraryCall& c) {
  return setMode<cublasAtomicsMode_t, &::cublasSetAtomicsMode>(c, "cublasSetAtomicsMode");
}

}  // namespace

const std::vector<Executor>& cublasExecutors() {
  static const std::vector<Executor> table = {
      {functionId("cublasCreate_v2"), "cublasCreate_v2", &create},
      {functionId("cublasDestroy_v2"), "cublasDestroy_v2", &destroy},
      {functionId("cublasSetStream_v2"), "cublasSetStream_v2", &setStream},
      {functionId("cublasSetWorkspace_v2"), "cublasSetWorkspace_v2", &setWorkspace},
      {functionId("cublasSetMathMode"), "cublasSetMathMode", &setMathMode},
      {functionId("cublasSetPointerMode_v2"), "cublasSetPointerMode_v2", &setPointerMode},
      {functionId("cublasSetAtomicsMode"), "cublasSetAtomicsMode", &setAtomicsMode},
  };
  return table;
}

}  // namespace tally::server::library
