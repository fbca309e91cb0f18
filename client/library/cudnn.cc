// cuDNN handles and the queries answered without tallyd. A handle is created in tallyd (round
// trip: the caller learns whether cuDNN initialized) and works on the tenant's legacy default
// stream until cudnnSetStream, which is mirrored here and sent only when it changes. The legacy
// routines are generated; the backend API is cudnn_backend.cc.
#include "client/api/api_util.h"
#include "client/library/library_call.h"
#include "client/runtime/client_runtime.h"

#include <cudnn.h>

#include <cstring>

using tally::client::ClientRuntime;
using namespace tally::client::library;
using tally::library::functionId;

namespace {
constexpr Family kFamily = Family::kCudnn;
}

TALLY_API cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  uint64_t id = 0;
  int status = createHandle(kFamily, "cudnnCreate", true, id);
  if (status == 0) *handle = reinterpret_cast<cudnnHandle_t>(id);
  return static_cast<cudnnStatus_t>(status);
}

TALLY_API cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  return static_cast<cudnnStatus_t>(destroyHandle(kFamily, "cudnnDestroy", handle, CUDNN_STATUS_BAD_PARAM));
}

TALLY_API cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  return static_cast<cudnnStatus_t>(setHandleStream(kFamily, "cudnnSetStream", handle, stream, CUDNN_STATUS_BAD_PARAM));
}

TALLY_API cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  return static_cast<cudnnStatus_t>(getHandleStream(kFamily, handle, stream, CUDNN_STATUS_BAD_PARAM));
}

// The cuDNN this client was built against; tallyd runs the same major version (its calls use
// this version's structure layouts), checked when the first handle is created.
TALLY_API size_t cudnnGetVersion(void) { return CUDNN_VERSION; }
TALLY_API size_t cudnnGetMaxDeviceVersion(void) { return CUDNN_MAX_DEVICE_VERSION; }
TALLY_API size_t cudnnGetCudartVersion(void) { return CUDART_VERSION; }

TALLY_API cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUDNN_STATUS_BAD_PARAM;
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    default: return CUDNN_STATUS_BAD_PARAM;
  }
}

TALLY_API const char* cudnnGetErrorString(cudnnStatus_t status) { return libraryStatusName(kFamily, status); }

// tallyd logs the library's own message; the client has none to give.
TALLY_API void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message != nullptr && max_size > 0) message[0] = '\0';
}

TALLY_API cudnnStatus_t cudnnQueryRuntimeError(cudnnHandle_t handle, cudnnStatus_t* rstatus, cudnnErrQueryMode_t mode,
                                               cudnnRuntimeTag_t* tag) {
  (void)mode;
  (void)tag;
  if (rstatus == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!LibraryHandles::get().find(handle, kFamily)) return CUDNN_STATUS_BAD_PARAM;
  *rstatus = CUDNN_STATUS_SUCCESS;
  return CUDNN_STATUS_SUCCESS;
}
