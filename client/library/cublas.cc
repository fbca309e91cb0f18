// cuBLAS handles: created and destroyed in tallyd (round trip / one-way); the settings PyTorch
// repeats before every GEMM (stream, workspace, math mode) are mirrored here and sent only when
// they change, so in steady state a GEMM is one one-way message. The pointer mode is mirrored
// because it decides how alpha/beta travel (library_call.h). The BLAS routines are generated.
#include "client/api/api_util.h"
#include "client/library/library_call.h"
#include "client/runtime/client_runtime.h"

#include <cublas_api.h>

using tally::client::ClientRuntime;
using namespace tally::client::library;
using tally::library::functionId;

namespace {

constexpr Family kFamily = Family::kCublas;

// Applies `change` to the mirror; `send` fills the one-way call when the value tallyd holds
// differs (`differs` decides, under the registry lock).
cublasStatus_t updateHandle(cublasHandle_t handle, const char* name, const std::function<bool(HandleState&)>& change,
                            const std::function<void(Call&)>& fill) {
  bool changed = false;
  if (!LibraryHandles::get().update(handle, kFamily, [&](HandleState& s) { changed = change(s); })) {
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  if (!changed) return CUBLAS_STATUS_SUCCESS;
  Call c(kFamily, name, functionId(name));
  fill(c);
  return static_cast<cublasStatus_t>(c.run(true));
}

cublasStatus_t setMode(cublasHandle_t handle, const char* name, int HandleState::*field, int mode) {
  return updateHandle(
      handle, name,
      [&](HandleState& s) {
        bool changed = s.*field != mode;
        s.*field = mode;
        return changed;
      },
      [&](Call& c) {
        c.handle(handle);
        c.value(static_cast<int32_t>(mode));
      });
}

template <typename T>
cublasStatus_t getMode(cublasHandle_t handle, int HandleState::*field, T* out) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto s = LibraryHandles::get().find(handle, kFamily);
  if (!s) return CUBLAS_STATUS_NOT_INITIALIZED;
  *out = static_cast<T>((*s).*field);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

TALLY_API cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t id = 0;
  int status = createHandle(kFamily, "cublasCreate_v2", true, id);
  if (status == 0) *handle = reinterpret_cast<cublasHandle_t>(id);
  return static_cast<cublasStatus_t>(status);
}

TALLY_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return static_cast<cublasStatus_t>(destroyHandle(kFamily, "cublasDestroy_v2", handle, CUBLAS_STATUS_NOT_INITIALIZED));
}

TALLY_API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return static_cast<cublasStatus_t>(
      setHandleStream(kFamily, "cublasSetStream_v2", handle, stream, CUBLAS_STATUS_NOT_INITIALIZED));
}

TALLY_API cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  return static_cast<cublasStatus_t>(getHandleStream(kFamily, handle, stream, CUBLAS_STATUS_NOT_INITIALIZED));
}

TALLY_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t size) {
  return updateHandle(
      handle, "cublasSetWorkspace_v2",
      [&](HandleState& s) {
        bool changed = !s.workspaceSent || s.workspace != workspace || s.workspaceSize != size;
        s.workspace = workspace;
        s.workspaceSize = size;
        s.workspaceSent = true;
        return changed;
      },
      [&](Call& c) {
        c.handle(handle);
        c.device(workspace);
        c.value(static_cast<uint64_t>(size));
      });
}

TALLY_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return setMode(handle, "cublasSetMathMode", &HandleState::mathMode, mode);
}
TALLY_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  return getMode(handle, &HandleState::mathMode, mode);
}
TALLY_API cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  return setMode(handle, "cublasSetPointerMode_v2", &HandleState::pointerMode, mode);
}
TALLY_API cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  return getMode(handle, &HandleState::pointerMode, mode);
}
TALLY_API cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode) {
  return setMode(handle, "cublasSetAtomicsMode", &HandleState::atomicsMode, mode);
}
TALLY_API cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t* mode) {
  return getMode(handle, &HandleState::atomicsMode, mode);
}

TALLY_API size_t cublasGetCudartVersion(void) { return CUDART_VERSION; }

TALLY_API const char* cublasGetStatusName(cublasStatus_t status) { return libraryStatusName(kFamily, status); }
TALLY_API const char* cublasGetStatusString(cublasStatus_t status) { return libraryStatusName(kFamily, status); }
