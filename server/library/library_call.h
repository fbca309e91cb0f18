// One forwarded library call as tallyd executes it: reads the arguments in the layout the client
// wrote (common/library/arg_buffer.h), turns ids into the tenant's library objects and streams,
// checks every device address against the tenant's memory, gives host scalars and outputs a
// home, and after the call registers what it created. Used by the generated executors
// (gen/server/library_exec.cc) and the hand-written ones (cublas_exec.cc, cublas_lt_exec.cc,
// cudnn_exec.cc, cudnn_backend_exec.cc).
//
// A refused argument (an id that is not the tenant's, an address it does not own) does not stop
// the reading: every argument is read, then the executor returns refusal() (the library's
// invalid-value status) without calling the library. Bytes that do not match the layout at all
// mark the call malformed: the session then drops the peer.
#pragma once

#include "common/library/arg_buffer.h"
#include "server/library/library_loader.h"
#include "server/session/library_object_table.h"

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tally::server::session {
class Tenant;
struct StreamState;
}
namespace tally::server::gpu {
class Gpu;
}

namespace tally::server::library {

using tally::library::ArgReader;
using tally::library::ArgWriter;
using tally::library::functionId;

// The client's stream id -> the tenant's stream, ordered for new work (nullptr if unknown).
using StreamResolver = std::function<session::StreamState*(uint64_t)>;

class LibraryCall {
 public:
  LibraryCall(session::Tenant& tenant, gpu::Gpu& gpu, Library library, const char* name, ArgReader args,
              StreamResolver streams);

  // --- argument kinds (generated code calls these in parameter order) ----------------------
  template <typename T>
  void value(T& out) {
    args_.get(out);
  }
  void* handle(uint32_t type);
  void* object(uint32_t type);
  // Storage the library writes a new object into; registered by complete() on success.
  void* objectOut(uint32_t type, void (*destroy)(void*));
  CUstream stream();
  void* device();
  const void* scalar();
  const void* hostScalar();
  void* scalarOut(size_t size);
  void* hostOut(size_t size);
  const void* arrayIn(int64_t count, size_t elementSize);
  void* arrayOut(int64_t count, size_t elementSize);

  // --- outcome (once every argument is read: an unread byte counts as malformed) ------------
  bool refused() const { return refused_ || args_.failed() || !args_.atEnd(); }
  int refusal();
  int missing() const;  // the library could not be loaded
  // Registers created objects when `status` is success; returns it.
  int complete(int status);
  // The descriptors this call named are gone (a Destroy* succeeded); handles are not touched.
  void forgetObjects();

  // --- for the hand-written executors and the dispatcher ------------------------------------
  void refuse(std::string why);
  uint64_t readId() { return args_.get<uint64_t>(); }
  ArgReader& reader() { return args_; }
  // A device range [address, address + size) the tenant must own; nullptr (refused) if not.
  void* ownedRange(uint64_t address, uint64_t size, const char* what);
  void* addOutput(size_t size);
  // Raw reply bytes appended after the parameter outputs.
  ArgWriter& extraOutput() { return extra_; }
  std::string outputBytes() const;
  bool malformed() const { return args_.failed() || !args_.atEnd(); }
  const std::string& refusalReason() const { return reason_; }
  session::Tenant& tenant() { return tenant_; }
  gpu::Gpu& gpu() { return gpu_; }
  Library library() const { return library_; }
  const char* name() const { return name_; }
  // The stream the call's work went to (a handle's), for the scheduler; nullptr if none.
  session::StreamState* workStream() const { return workStream_; }
  void setWorkStream(session::StreamState* s) { workStream_ = s; }
  session::StreamState* resolveStream(uint64_t id) { return streams_(id); }
  // Aligned scratch the call's host pointers point into; lives as long as the call.
  void* scratch(size_t size);

 private:
  struct Pending {
    uint64_t id;
    uint32_t type;
    void* object = nullptr;
    void (*destroy)(void*);
  };

  session::Tenant& tenant_;
  gpu::Gpu& gpu_;
  Library library_;
  const char* name_;
  ArgReader args_;
  StreamResolver streams_;
  bool refused_ = false;
  std::string reason_;
  std::deque<Pending> pending_;
  std::vector<uint64_t> named_;
  std::vector<std::unique_ptr<std::max_align_t[]>> scratch_;
  std::vector<std::pair<void*, size_t>> outputs_;
  ArgWriter extra_;
  session::StreamState* workStream_ = nullptr;
};

// The handle executors every library shares. Layout: create = {id, [default stream id]};
// destroy = {id}; set stream = {id, stream id}. `create` makes the library's handle (status),
// `bindStream` points it at a stream (may be null: a library whose handle has no stream).
struct HandleOps {
  uint32_t type;
  int (*create)(void** handle);
  void (*destroy)(void* handle);
  int (*bindStream)(void* handle, CUstream stream);
  int allocFailed;  // the library's status for "no room for another handle"
  // The library's version (cudnnGetVersion, cublasLtGetVersion), returned with a new handle so
  // the client can warn when it was built against another; null: none returned.
  size_t (*version)();
};
int createHandle(LibraryCall& c, const HandleOps& ops);
int destroyHandle(LibraryCall& c, const HandleOps& ops);
int setHandleStream(LibraryCall& c, const HandleOps& ops);

struct Executor {
  uint32_t id;
  const char* name;
  int (*run)(LibraryCall&);
  // GPU work on the handle's stream (a GEMM, a convolution): scheduled like a kernel. False for
  // handle and descriptor set-up and queries.
  bool work = false;
};

// Every executor: generated ones and the hand-written families.
const std::vector<Executor>& generatedExecutors();
const std::vector<Executor>& cublasExecutors();
const std::vector<Executor>& cublasLtExecutors();
const std::vector<Executor>& cudnnExecutors();
const std::vector<Executor>& cudnnBackendExecutors();
const std::vector<Executor>& cufftExecutors();
// nullptr for an id no executor has.
const Executor* findExecutor(uint32_t id);
// Which library a function belongs to, from its name.
Library libraryOf(const char* name);

// Library status codes the dispatcher needs.
int notSupportedStatus(Library lib);
int invalidValueStatus(Library lib);
int notInitializedStatus(Library lib);

// Type tags of the handle types.
inline constexpr uint32_t kCublasHandleType = functionId("cublasHandle_t");
inline constexpr uint32_t kCublasLtHandleType = functionId("cublasLtHandle_t");
inline constexpr uint32_t kCudnnHandleType = functionId("cudnnHandle_t");
inline constexpr uint32_t kCufftHandleType = functionId("cufftHandle");

}  // namespace tally::server::library
