// cuDNN handles: created on the tenant's legacy default stream (never the context's NULL stream,
// which every tenant shares), destroyed, moved to another of the tenant's streams. The legacy
// routines are generated; the backend API is cudnn_backend_exec.cc.
#include "server/library/library_call.h"
#include "server/session/tenant.h"

#include <cudnn.h>

namespace tally::server::library {
namespace {

template <typename Fn>
Fn cudnn(const char* name) {
  return resolve<Fn>(Library::kCudnn, name);
}

int createReal(void** h) {
  static auto* fn = cudnn<decltype(&::cudnnCreate)>("cudnnCreate");
  return fn != nullptr ? fn(reinterpret_cast<cudnnHandle_t*>(h)) : CUDNN_STATUS_NOT_INITIALIZED;
}
void destroyReal(void* h) {
  static auto* fn = cudnn<decltype(&::cudnnDestroy)>("cudnnDestroy");
  if (fn != nullptr) fn(static_cast<cudnnHandle_t>(h));
}
int bindStream(void* h, CUstream s) {
  static auto* fn = cudnn<decltype(&::cudnnSetStream)>("cudnnSetStream");
  return fn != nullptr ? fn(static_cast<cudnnHandle_t>(h), reinterpret_cast<cudaStream_t>(s)) : CUDNN_STATUS_NOT_INITIALIZED;
}
size_t version() {
  static auto* fn = cudnn<decltype(&::cudnnGetVersion)>("cudnnGetVersion");
  return fn != nullptr ? fn() : 0;
}
constexpr HandleOps kHandle{kCudnnHandleType, &createReal, &destroyReal, &bindStream, CUDNN_STATUS_ALLOC_FAILED,
                            &version};

int create(LibraryCall& c) { return createHandle(c, kHandle); }
int destroy(LibraryCall& c) { return destroyHandle(c, kHandle); }
int setStream(LibraryCall& c) { return setHandleStream(c, kHandle); }

}  // namespace

const std::vector<Executor>& cudnnExecutors() {
  static const std::vector<Executor> table = {
      {functionId("cudnnCreate"), "cudnnCreate", &create},
      {functionId("cudnnDestroy"), "cudnnDestroy", &destroy},
      {functionId("cudnnSetStream"), "cudnnSetStream", &setStream},
  };
  return table;
}

}  // namespace tally::server::library
