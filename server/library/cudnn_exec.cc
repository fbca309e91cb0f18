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

void destroyHandle(void* h) {
  static auto* fn = cudnn<decltype(&::cudnnDestroy)>("cudnnDestroy");
  if (fn != nullptr) fn(static_cast<cudnnHandle_t>(h));
}

int create(LibraryCall& c) {
  uint64_t id = c.readId();
  uint64_t defaultStream = c.readId();
  session::StreamState* s = c.resolveStream(defaultStream);
  if (s == nullptr) c.refuse("no default stream");
  if (id == 0 || c.tenant().libraryObjects().find(id, kCudnnHandleType) != nullptr) c.refuse("handle id taken");
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnCreate)>("cudnnCreate");
  static auto* setStream = cudnn<decltype(&::cudnnSetStream)>("cudnnSetStream");
  if (fn == nullptr || setStream == nullptr) return c.missing();
  cudnnHandle_t h = nullptr;
  if (cudnnStatus_t st = fn(&h); st != CUDNN_STATUS_SUCCESS) return st;
  setStream(h, reinterpret_cast<cudaStream_t>(s->stream));
  if (!c.tenant().libraryObjects().insert(id, {kCudnnHandleType, h, &destroyHandle, &c.gpu(), defaultStream})) {
    destroyHandle(h);
    return CUDNN_STATUS_ALLOC_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

int destroy(LibraryCall& c) {
  uint64_t id = c.readId();
  session::LibraryObject* h = c.tenant().libraryObjects().find(id, kCudnnHandleType);
  if (h == nullptr) c.refuse("not a cuDNN handle of the tenant");
  if (c.refused()) return c.refusal();
  destroyHandle(h->object);
  c.tenant().libraryObjects().erase(id);
  return CUDNN_STATUS_SUCCESS;
}

int setStream(LibraryCall& c) {
  uint64_t id = c.readId();
  uint64_t streamId = c.readId();
  session::LibraryObject* h = c.tenant().libraryObjects().find(id, kCudnnHandleType);
  session::StreamState* s = c.resolveStream(streamId);
  if (h == nullptr || s == nullptr) c.refuse("unknown handle or stream");
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnSetStream)>("cudnnSetStream");
  if (fn == nullptr) return c.missing();
  h->streamId = streamId;
  return fn(static_cast<cudnnHandle_t>(h->object), reinterpret_cast<cudaStream_t>(s->stream));
}

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
