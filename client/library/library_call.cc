#include "client/library/library_call.h"

#include "client/api/api_util.h"
#include "client/runtime/client_runtime.h"
#include "client/transport/host_memory.h"

#include <cublas_api.h>
#include <cstring>
#include <mutex>
#include <cudnn.h>
#include <cufft.h>
#include <spdlog/spdlog.h>

namespace tally::client::library {
namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

// Reads up to `size` bytes of a host scalar without risking a signal: where the whole width is
// not mapped (a float at the end of a page, read as a double), the narrower widths are tried.
bool readScalar(const void* p, size_t size, std::string& out) {
  for (size_t width : {size_t{16}, size_t{8}, size_t{4}, size_t{2}, size_t{1}}) {
    if (width > size) continue;
    out.resize(width);
    if (host_memory::copyIn(out.data(), p, width)) return true;
  }
  return false;
}

// What the client answers itself, in each library's own status enum.
struct FamilyStatuses {
  int notInitialized;   // tallyd unreachable
  int invalidValue;
  int badHandle;
  int executionFailed;  // the connection broke
  int notSupported;
};

const FamilyStatuses& statusesOf(Family f) {
  static constexpr FamilyStatuses kCublas{CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_INVALID_VALUE,
                                          CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_EXECUTION_FAILED,
                                          CUBLAS_STATUS_NOT_SUPPORTED};
  static constexpr FamilyStatuses kCudnn{CUDNN_STATUS_NOT_INITIALIZED, CUDNN_STATUS_BAD_PARAM, CUDNN_STATUS_BAD_PARAM,
                                         CUDNN_STATUS_EXECUTION_FAILED, CUDNN_STATUS_NOT_SUPPORTED};
  static constexpr FamilyStatuses kCufft{CUFFT_SETUP_FAILED, CUFFT_INVALID_VALUE, CUFFT_INVALID_PLAN,
                                         CUFFT_EXEC_FAILED, CUFFT_NOT_SUPPORTED};
  switch (f) {
    case Family::kCudnn: return kCudnn;
    case Family::kCufft: return kCufft;
    case Family::kCublas:
    case Family::kCublasLt: break;
  }
  return kCublas;
}

// Version numbers as each library's header encodes them, and the unit of the part that must match.
struct VersionRule {
  const char* library;
  uint64_t built;
  uint64_t unit;
};

VersionRule versionRuleOf(Family f) {
  // cuBLAS keeps its structures within a major version (major*10000 + ...), cuDNN is compared to
  // the minor (its backend attributes grow between minors: major*10000 + minor*100 + ...), cuFFT
  // to the major (major*1000 + ...).
  switch (f) {
    case Family::kCudnn: return {"cuDNN", CUDNN_VERSION, 100};
    case Family::kCufft: return {"cuFFT", CUFFT_VERSION, 1000};
    case Family::kCublas:
    case Family::kCublasLt: break;
  }
  return {"cuBLAS", CUBLAS_VERSION, 10000};
}

// tallyd runs its own copy of the library; structures that travel by value (heuristic results,
// perf results, algorithms) must have this client's layout.
void warnIfVersionDiffers(Family family, const std::string& reply) {
  uint64_t server = 0;
  if (reply.size() != sizeof server) return;
  std::memcpy(&server, reply.data(), sizeof server);
  VersionRule rule = versionRuleOf(family);
  if (server / rule.unit == rule.built / rule.unit) return;
  static std::once_flag once[kFamilies];
  std::call_once(once[static_cast<int>(family)], [&] {
    spdlog::warn("tally: tallyd runs {} version {}, this client was built against {}; calls whose structures differ "
                 "between versions may fail", rule.library, server, rule.built);
  });
}

}  // namespace

int successStatus() { return 0; }
int notInitializedStatus(Family f) { return statusesOf(f).notInitialized; }
int invalidValueStatus(Family f) { return statusesOf(f).invalidValue; }
int badHandleStatus(Family f) { return statusesOf(f).badHandle; }
int executionFailedStatus(Family f) { return statusesOf(f).executionFailed; }

LibraryHandles& LibraryHandles::get() {
  static LibraryHandles* registry = new LibraryHandles();  // leaked: used from atexit handlers
  return *registry;
}

uint64_t LibraryHandles::add(HandleState state) {
  uint64_t id = Call::newObjectId();
  std::lock_guard<std::mutex> lock(mutex_);
  handles_.emplace(id, state);
  return id;
}

std::optional<HandleState> LibraryHandles::find(const void* handle, Family family) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = handles_.find(reinterpret_cast<uintptr_t>(handle));
  if (it == handles_.end() || it->second.family != family) return std::nullopt;
  return it->second;
}

bool LibraryHandles::update(const void* handle, Family family, const std::function<void(HandleState&)>& change) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = handles_.find(reinterpret_cast<uintptr_t>(handle));
  if (it == handles_.end() || it->second.family != family) return false;
  change(it->second);
  return true;
}

bool LibraryHandles::remove(const void* handle, Family family) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = handles_.find(reinterpret_cast<uintptr_t>(handle));
  if (it == handles_.end() || it->second.family != family) return false;
  handles_.erase(it);
  return true;
}

Call::Call(Family family, const char* name, uint32_t function) : family_(family), name_(name), function_(function) {}

uint64_t Call::newObjectId() { return ClientRuntime::get().newHandleId(); }

void Call::handle(const void* h) {
  LibraryHandles& handles = LibraryHandles::get();
  // cuBLAS documents that a cuBLAS handle also serves as a cuBLASLt handle.
  bool known = handles.find(h, family_).has_value() ||
               (family_ == Family::kCublasLt && handles.find(h, Family::kCublas).has_value());
  if (!known) refuse(badHandleStatus(family_));
  args_.put(id(h));
}

void Call::stream(cudaStream_t s) {
  uint64_t id = rt().ready() == CUDA_SUCCESS ? rt().streamId(s) : 0;
  if (id == 0) refuse(invalidValueStatus(family_));
  args_.put(id);
}

void Call::scalar(const void* handle, const void* p, size_t size) {
  auto state = LibraryHandles::get().find(handle, family_);
  bool onDevice = state && state->pointerMode == CUBLAS_POINTER_MODE_DEVICE;
  if (onDevice) {
    args_.put(tally::library::ScalarPlace::kDevice);
    device(p);
    return;
  }
  args_.put(tally::library::ScalarPlace::kHost);
  std::string bytes;
  if (p == nullptr || !readScalar(p, size == 0 ? tally::library::kMaxScalarBytes : size, bytes)) {
    refuse(invalidValueStatus(family_));
  }
  args_.putBytes(bytes.data(), static_cast<uint32_t>(bytes.size()));
}

void Call::scalarOut(const void* handle, void* p, size_t size) {
  auto state = LibraryHandles::get().find(handle, family_);
  if (state && state->pointerMode == CUBLAS_POINTER_MODE_DEVICE) {
    args_.put(tally::library::ScalarPlace::kDevice);
    device(p);
    return;
  }
  args_.put(tally::library::ScalarPlace::kHost);
  if (p == nullptr) refuse(invalidValueStatus(family_));
  addOutput(p, size);
}

void Call::hostScalar(const void* p) {
  std::string bytes;
  if (p != nullptr && !readScalar(p, 8, bytes)) refuse(invalidValueStatus(family_));
  args_.putBytes(bytes.data(), static_cast<uint32_t>(bytes.size()));
}

void Call::hostOut(void* p, size_t size) {
  args_.put(static_cast<uint8_t>(p != nullptr));
  if (p != nullptr) addOutput(p, size);
}

void Call::putArray(const void* p, int64_t count, size_t elementSize) {
  args_.put(static_cast<uint8_t>(p != nullptr));
  if (p == nullptr) return;
  if (count < 0 || static_cast<uint64_t>(count) * elementSize > tally::library::kMaxHostBytes) {
    refuse(invalidValueStatus(family_));
    args_.putBytes(nullptr, 0);
    return;
  }
  std::string bytes(static_cast<size_t>(count) * elementSize, '\0');
  if (!host_memory::copyIn(bytes.data(), p, bytes.size())) refuse(invalidValueStatus(family_));
  args_.putBytes(bytes.data(), static_cast<uint32_t>(bytes.size()));
}

void Call::addOutput(void* p, size_t size) {
  if (size > tally::library::kMaxHostBytes) {
    refuse(invalidValueStatus(family_));
    return;
  }
  if (p != nullptr && size != 0) outputs_.emplace_back(p, size);
}

bool Call::scatterOutputs(const std::string& bytes) {
  size_t total = 0;
  for (const auto& [p, size] : outputs_) total += size;
  if (total != bytes.size()) {
    spdlog::error("tally: {}: tallyd returned {} output bytes, expected {}", name_, bytes.size(), total);
    return false;
  }
  size_t offset = 0;
  for (const auto& [p, size] : outputs_) {
    if (!host_memory::copyOut(p, bytes.data() + offset, size)) return false;
    offset += size;
  }
  return true;
}

int Call::run(bool oneWayAllowed) {
  if (refused_ != 0) return refused_ == -1 ? invalidValueStatus(family_) : refused_;
  if (rt().ready() != CUDA_SUCCESS) return notInitializedStatus(family_);
  std::optional<std::string> key;
  if (cacheRole_ == CacheRole::kSizeQuery) {
    key = AnswerCache::get().key(function_, withoutIds(args_.bytes(), named_), named_);
    std::optional<std::string> known = key ? AnswerCache::get().answer(*key) : std::nullopt;
    if (known) return scatterOutputs(*known) ? successStatus() : invalidValueStatus(family_);
  }
  int status = send(oneWayAllowed);
  if (status == successStatus()) noteForCache(key);
  return status;
}

void Call::noteForCache(const std::optional<std::string>& key) {
  switch (cacheRole_) {
    case CacheRole::kSizeQuery:
      if (key) AnswerCache::get().remember(*key, replyBytes_);
      break;
    case CacheRole::kSetsDescriptor:
      if (!named_.empty()) {
        AnswerCache::get().noteSet(named_.front().id, function_, withoutIds(args_.bytes(), named_),
                                   std::span(named_).subspan(1));
      }
      break;
    case CacheRole::kDestroysDescriptor:
      if (!named_.empty()) AnswerCache::get().forget(named_.front().id);
      break;
    case CacheRole::kNone:
      break;
  }
}

int Call::send(bool oneWayAllowed) {
  auto build = [this](wire::Call::Builder call) {
    auto lib = call.initLibrary();
    lib.setFunction(function_);
    lib.setDevice(currentDevice());
    lib.setArgs(kj::arrayPtr(reinterpret_cast<const kj::byte*>(args_.bytes().data()), args_.bytes().size()));
  };
  if (oneWayAllowed && outputs_.empty()) {
    return rt().post(build) == CUDA_SUCCESS ? successStatus() : executionFailedStatus(family_);
  }
  ReplyMessage reply;
  int status = static_cast<int>(rt().call(build, &reply));
  if (rt().connection().broken()) return executionFailedStatus(family_);
  // A tallyd without this function answers in CUDA's terms.
  if (status == CUDA_ERROR_NOT_SUPPORTED) return statusesOf(family_).notSupported;
  if (status != 0) return status;
  auto out = reply.reply();
  std::string bytes;
  if (out.isLibraryOut()) {
    auto data = out.getLibraryOut();
    bytes.assign(reinterpret_cast<const char*>(data.begin()), data.size());
  }
  replyBytes_ = bytes;
  if (!outputs_.empty() && !scatterOutputs(bytes)) return executionFailedStatus(family_);
  return successStatus();
}

int createHandle(Family family, const char* name, bool withDefaultStream, uint64_t& out) {
  if (rt().ready() != CUDA_SUCCESS) return notInitializedStatus(family);
  uint64_t id = LibraryHandles::get().add(HandleState{family});
  Call c(family, name, tally::library::functionId(name));
  c.value(id);
  if (withDefaultStream) c.value(rt().streamId(nullptr));
  int status = c.run(false);
  if (status != successStatus()) {
    LibraryHandles::get().remove(reinterpret_cast<void*>(id), family);
    return status;
  }
  warnIfVersionDiffers(family, c.replyBytes());
  out = id;
  return status;
}

int destroyHandle(Family family, const char* name, const void* handle, int badHandle) {
  if (!LibraryHandles::get().remove(handle, family)) return badHandle;
  Call c(family, name, tally::library::functionId(name));
  c.value(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)));  // no longer in the registry
  return c.run(true);
}

int setHandleStream(Family family, const char* name, const void* handle, cudaStream_t stream, int badHandle) {
  uint64_t id = rt().ready() == CUDA_SUCCESS ? rt().streamId(stream) : 0;
  if (id == 0) return invalidValueStatus(family);
  bool changed = false;
  bool known = LibraryHandles::get().update(handle, family, [&](HandleState& s) {
    changed = s.sentStream != id;
    s.stream = stream;
    s.sentStream = id;
  });
  if (!known) return badHandle;
  if (!changed) return successStatus();
  Call c(family, name, tally::library::functionId(name));
  c.handle(handle);
  c.value(id);
  return c.run(true);
}

int getHandleStream(Family family, const void* handle, cudaStream_t* stream, int badHandle) {
  if (stream == nullptr) return invalidValueStatus(family);
  auto s = LibraryHandles::get().find(handle, family);
  if (!s) return badHandle;
  *stream = s->stream;
  return successStatus();
}

}  // namespace tally::client::library
