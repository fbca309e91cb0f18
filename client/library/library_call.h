// Marshalling of one forwarded cuBLAS / cuBLASLt / cuDNN / cuFFT call (generated stubs and the
// hand-written functions both use it): each parameter is appended in declaration order as the
// kind the generator gave it (schema/codegen/gen_library_stubs.py); run() sends the call one-way
// when it has no outputs, else waits for the reply and copies the outputs into the caller's
// pointers.
//
// Handles and descriptors the application holds are ids chosen here (never pointers into
// tallyd); the client keeps what it must know about a handle (its pointer mode decides whether
// alpha/beta are host bytes or device addresses) in LibraryHandles.
#pragma once

#include "client/library/answer_cache.h"
#include "common/library/arg_buffer.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tally::client::library {

using tally::library::ArgWriter;

enum class Family { kCublas, kCublasLt, kCudnn, kCufft };
inline constexpr int kFamilies = 4;

// The library's own status codes for what the client itself decides.
int successStatus();
int notInitializedStatus(Family f);  // tallyd unreachable
int invalidValueStatus(Family f);    // an argument the client refuses
int badHandleStatus(Family f);       // a handle that is not ours
int executionFailedStatus(Family f);  // the connection broke during the call
// "CUBLAS_STATUS_NOT_SUPPORTED", "CUDNN_STATUS_BAD_PARAM", ... (generated from the headers).
const char* libraryStatusName(Family family, int status);

// What the client mirrors of a cuBLAS / cuDNN / cuBLASLt handle.
struct HandleState {
  Family family = Family::kCublas;
  int pointerMode = 0;  // CUBLAS_POINTER_MODE_HOST
  int mathMode = 0;
  int atomicsMode = 0;
  cudaStream_t stream = nullptr;        // as the application named it
  uint64_t sentStream = 0;             // last stream id tallyd applied (0: none yet)
  void* workspace = nullptr;
  size_t workspaceSize = 0;
  bool workspaceSent = false;
};

// Handles live until destroyed; ids are the values the application holds.
class LibraryHandles {
 public:
  static LibraryHandles& get();
  uint64_t add(HandleState state);
  // A copy of the state, or nullopt for a value that is not a live handle of `family`.
  std::optional<HandleState> find(const void* handle, Family family);
  bool update(const void* handle, Family family, const std::function<void(HandleState&)>& change);
  bool remove(const void* handle, Family family);

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, HandleState> handles_;
};

// Creates a handle in tallyd (a round trip: the caller learns whether the library initialized)
// under a fresh id, sent with the client's legacy default stream when `withDefaultStream` (the
// handle's work goes there until set otherwise). The library's status; `out` = the id on success.
int createHandle(Family family, const char* name, bool withDefaultStream, uint64_t& out);
// Forgets the handle here and destroys it in tallyd (one-way); `badHandle` if it is not one.
int destroyHandle(Family family, const char* name, const void* handle, int badHandle);

// cublasSetStream / cudnnSetStream: mirrored, and sent (one-way) only when it changes — PyTorch
// sets the stream before every call. `badHandle` if `handle` is not one of `family`'s.
int setHandleStream(Family family, const char* name, const void* handle, cudaStream_t stream, int badHandle);
// The stream the application set, as it named it.
int getHandleStream(Family family, const void* handle, cudaStream_t* stream, int badHandle);

class Call {
 public:
  Call(Family family, const char* name, uint32_t function);

  template <typename T>
  void value(const T& v) {
    args_.put(v);
  }
  // A handle this client did not create (or destroyed) is refused here, with the status the
  // library gives a bad handle, before anything is sent.
  void handle(const void* h);
  void object(const void* o, uint32_t /*typeTag: checked by tallyd*/) {
    if (cacheRole_ != CacheRole::kNone) named_.push_back({id(o), args_.bytes().size()});
    args_.put(id(o));
  }
  // A descriptor created by this call: the id is chosen here and written to *out at once.
  template <typename T>
  void objectOut(T* out, uint32_t typeTag) {
    (void)typeTag;  // checked by tallyd
    uint64_t fresh = newObjectId();
    args_.put(fresh);
    if (out == nullptr) {
      refuse();
    } else {
      *out = reinterpret_cast<T>(static_cast<uintptr_t>(fresh));
    }
  }
  void stream(cudaStream_t s);
  void device(const void* p) { args_.put(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
  // cuBLAS alpha/beta: host bytes (`size` of them, or up to 16 when 0) or a device address,
  // as the handle's pointer mode says.
  void scalar(const void* handle, const void* p, size_t size);
  void scalarOut(const void* handle, void* p, size_t size);
  // cuDNN alpha/beta: always host; float or double depending on the tensors, so up to 8 bytes.
  void hostScalar(const void* p);
  void hostOut(void* p, size_t size);
  template <typename N>
  void arrayIn(const void* p, N count, size_t elementSize) {
    putArray(p, static_cast<int64_t>(count), elementSize);
  }
  template <typename N>
  void arrayOut(void* p, N count, size_t elementSize) {
    args_.put(static_cast<uint8_t>(p != nullptr));
    if (p != nullptr) addOutput(p, count > 0 ? static_cast<size_t>(count) * elementSize : 0);
  }
  // Raw bytes and outputs for hand-written layouts.
  ArgWriter& args() { return args_; }
  void addOutput(void* p, size_t size);
  // Marks the call as refused before sending (a bad argument found here); run() then returns
  // `status` without a round trip.
  void refuse(int status = -1) { refused_ = status; }
  // What this call does for the client's answer cache (the generator says; answer_cache.h).
  // Set before the arguments: only then are the descriptors it names recorded.
  void cacheRole(CacheRole role) { cacheRole_ = role; }

  // Sends the call; returns the library status. `oneWayAllowed`: no reply is needed unless the
  // call has outputs (its error then surfaces at the next synchronizing call).
  int run(bool oneWayAllowed);
  // The reply's output bytes after run() (hand-written callers that parse their own outputs).
  const std::string& replyBytes() const { return replyBytes_; }

  static uint64_t newObjectId();

 private:
  static uint64_t id(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }
  void putArray(const void* p, int64_t count, size_t elementSize);
  bool scatterOutputs(const std::string& bytes);
  int send(bool oneWayAllowed);
  void noteForCache(const std::optional<std::string>& key);

  Family family_;
  const char* name_;
  uint32_t function_;
  ArgWriter args_;
  std::vector<std::pair<void*, size_t>> outputs_;
  std::string replyBytes_;
  int refused_ = 0;
  CacheRole cacheRole_ = CacheRole::kNone;
  std::vector<NamedDescriptor> named_;
};

}  // namespace tally::client::library
