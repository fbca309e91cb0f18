// cuBLAS handle lifecycle and the handle state the client mirrors (stream, workspace, math,
// pointer and atomics modes). The client sends a setting only when it changes, so these are
// one-way calls of a few bytes; the BLAS routines themselves are generated.
#include "server/library/library_call.h"
#include "server/session/tenant.h"

#include <cublas_api.h>
#include <spdlog/spdlog.h>

namespace tally::server::library {
namespace {

template <typename Fn>
Fn cublas(const char* name) {
  return resolve<Fn>(Library::kCublas, name);
}

void destroyHandle(void* h) {
  static auto* fn = cublas<decltype(&::cublasDestroy_v2)>("cublasDestroy_v2");
  if (fn != nullptr) fn(static_cast<cublasHandle_t>(h));
}

// A new handle works on the tenant's legacy default stream, never the context's NULL stream
// (which every tenant shares).
int create(LibraryCall& c) {
  uint64_t id = c.readId();
  uint64_t defaultStream = c.readId();
  session::StreamState* s = c.resolveStream(defaultStream);
  if (s == nullptr) c.refuse("no default stream");
  if (id == 0 || c.tenant().libraryObjects().find(id, kCublasHandleType) != nullptr) c.refuse("handle id taken");
  if (c.refused()) return c.refusal();
  static auto* fn = cublas<decltype(&::cublasCreate_v2)>("cublasCreate_v2");
  static auto* setStream = cublas<decltype(&::cublasSetStream_v2)>("cublasSetStream_v2");
  if (fn == nullptr || setStream == nullptr) return c.missing();
  cublasHandle_t h = nullptr;
  if (cublasStatus_t st = fn(&h); st != CUBLAS_STATUS_SUCCESS) return st;
  setStream(h, s->stream);
  if (!c.tenant().libraryObjects().insert(id, {kCublasHandleType, h, &destroyHandle, &c.gpu(), defaultStream})) {
    destroyHandle(h);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

int destroy(LibraryCall& c) {
  uint64_t id = c.readId();
  session::LibraryObject* h = c.tenant().libraryObjects().find(id, kCublasHandleType);
  if (h == nullptr) c.refuse("not a handle of the tenant");
  if (c.refused()) return c.refusal();
  destroyHandle(h->object);
  c.tenant().libraryObjects().erase(id);
  return CUBLAS_STATUS_SUCCESS;
}

int setStream(LibraryCall& c) {
  uint64_t id = c.readId();
  uint64_t streamId = c.readId();
  session::LibraryObject* h = c.tenant().libraryObjects().find(id, kCublasHandleType);
  session::StreamState* s = c.resolveStream(streamId);
  if (h == nullptr || s == nullptr) c.refuse("unknown handle or stream");
  if (c.refused()) return c.refusal();
  static auto* fn = cublas<decltype(&::cublasSetStream_v2)>("cublasSetStream_v2");
  if (fn == nullptr) return c.missing();
  h->streamId = streamId;
  return fn(static_cast<cublasHandle_t>(h->object), s->stream);
}

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
