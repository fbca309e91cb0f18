#include "server/library/library_call.h"

#include "server/gpu/gpu.h"
#include "server/session/tenant.h"

#include <cublas_api.h>
#include <cudnn.h>
#include <cufft.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <unordered_map>

namespace tally::server::library {

using tally::library::kMaxHostBytes;
using tally::library::ScalarPlace;

LibraryCall::LibraryCall(session::Tenant& tenant, gpu::Gpu& gpu, Library library, const char* name, ArgReader args,
                         StreamResolver streams)
    : tenant_(tenant), gpu_(gpu), library_(library), name_(name), args_(args), streams_(std::move(streams)) {}

void LibraryCall::refuse(std::string why) {
  if (!refused_) reason_ = std::move(why);
  refused_ = true;
}

void* LibraryCall::handle(uint32_t type) {
  uint64_t id = readId();
  session::LibraryObject* h = tenant_.libraryObjects().find(id, type);
  if (h == nullptr) {
    refuse(fmt::format("handle {:#x} is not one of the tenant's", id));
    return nullptr;
  }
  // Re-resolved every time: a stream the application destroyed must not be reused through a
  // handle (its CUstream may be another tenant's by now).
  if (h->streamId != 0) {
    workStream_ = streams_(h->streamId);
    if (workStream_ == nullptr) refuse(fmt::format("the stream {:#x} of handle {:#x} is gone", h->streamId, id));
  }
  // Resolving may have moved the stream to another SM partition: the library's kernels must
  // follow it, or they run unordered with the tenant's own work on that stream.
  if (workStream_ != nullptr && h->bindStream != nullptr && h->boundStream != workStream_->stream) {
    if (h->bindStream(h->object, workStream_->stream) != 0) {
      refuse(fmt::format("handle {:#x}: the library refused its stream {:#x}", id, h->streamId));
    } else {
      h->boundStream = workStream_->stream;
    }
  }
  return h->object;
}

void* LibraryCall::object(uint32_t type) {
  uint64_t id = readId();
  if (id == 0) return nullptr;  // an optional descriptor left out
  session::LibraryObject* o = tenant_.libraryObjects().find(id, type);
  if (o == nullptr) {
    refuse(fmt::format("descriptor {:#x} is not one of the tenant's of this type", id));
    return nullptr;
  }
  named_.push_back(id);
  return o->object;
}

void* LibraryCall::objectOut(uint32_t type, void (*destroy)(void*)) {
  uint64_t id = readId();
  if (id == 0 || tenant_.libraryObjects().find(id, type) != nullptr) refuse(fmt::format("object id {:#x} is taken", id));
  pending_.push_back(Pending{id, type, nullptr, destroy});
  return &pending_.back().object;
}

CUstream LibraryCall::stream() {
  uint64_t id = readId();
  session::StreamState* s = streams_(id);
  if (s == nullptr) {
    refuse(fmt::format("stream {:#x} is not one of the tenant's", id));
    return nullptr;
  }
  workStream_ = s;
  return s->stream;
}

void* LibraryCall::ownedRange(uint64_t address, uint64_t size, const char* what) {
  if (address == 0) return nullptr;
  if (tenant_.memory().ownerOf(address, size == 0 ? 1 : size) == nullptr) {
    refuse(fmt::format("{} {:#x} (+{} bytes) is not the tenant's device memory", what, address, size));
    return nullptr;
  }
  return reinterpret_cast<void*>(address);
}

void* LibraryCall::device() { return ownedRange(readId(), 1, "address"); }

void* LibraryCall::scratch(size_t size) {
  size_t words = (size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  scratch_.push_back(std::make_unique<std::max_align_t[]>(words == 0 ? 1 : words));
  std::memset(scratch_.back().get(), 0, (words == 0 ? 1 : words) * sizeof(std::max_align_t));
  return scratch_.back().get();
}

const void* LibraryCall::scalar() {
  auto place = args_.get<ScalarPlace>();
  if (place == ScalarPlace::kDevice) return device();
  const uint8_t* bytes = nullptr;
  uint32_t size = 0;
  args_.getBytes(bytes, size);
  if (size == 0 || size > tally::library::kMaxScalarBytes) {
    refuse("a host scalar of " + std::to_string(size) + " bytes");
    return nullptr;
  }
  // The library reads as many bytes as its type needs; the rest of the 16 are zeros.
  void* home = scratch(tally::library::kMaxScalarBytes);
  std::memcpy(home, bytes, size);
  return home;
}

const void* LibraryCall::hostScalar() {
  const uint8_t* bytes = nullptr;
  uint32_t size = 0;
  args_.getBytes(bytes, size);
  if (size == 0) return nullptr;
  if (size > tally::library::kMaxScalarBytes) {
    refuse("a host scalar of " + std::to_string(size) + " bytes");
    return nullptr;
  }
  void* home = scratch(tally::library::kMaxScalarBytes);
  std::memcpy(home, bytes, size);
  return home;
}

void* LibraryCall::addOutput(size_t size) {
  if (size > kMaxHostBytes) {
    refuse("an output of " + std::to_string(size) + " bytes");
    return nullptr;
  }
  void* home = scratch(size);
  outputs_.emplace_back(home, size);
  return home;
}

void* LibraryCall::scalarOut(size_t size) {
  auto place = args_.get<ScalarPlace>();
  if (place == ScalarPlace::kDevice) return device();
  return addOutput(size);
}

void* LibraryCall::hostOut(size_t size) {
  if (args_.get<uint8_t>() == 0) return nullptr;
  return addOutput(size);
}

const void* LibraryCall::arrayIn(int64_t count, size_t elementSize) {
  if (args_.get<uint8_t>() == 0) return nullptr;
  const uint8_t* bytes = nullptr;
  uint32_t size = 0;
  args_.getBytes(bytes, size);
  // The library reads `count` elements: fewer bytes than that would let it read tallyd's memory.
  if (count < 0 || static_cast<uint64_t>(count) * elementSize > size) {
    refuse(fmt::format("an array of {} bytes for {} elements", size, count));
    return nullptr;
  }
  void* home = scratch(size);
  std::memcpy(home, bytes, size);
  return home;
}

void* LibraryCall::arrayOut(int64_t count, size_t elementSize) {
  if (args_.get<uint8_t>() == 0) return nullptr;
  if (count < 0 || static_cast<uint64_t>(count) * elementSize > kMaxHostBytes) {
    refuse(fmt::format("an output array of {} elements", count));
    return nullptr;
  }
  return addOutput(static_cast<size_t>(count) * elementSize);
}

int LibraryCall::refusal() {
  if (malformed()) return invalidValueStatus(library_);
  spdlog::warn("tenant {}: {} refused: {}", tenant_.name(), name_, reason_);
  return invalidValueStatus(library_);
}

int LibraryCall::missing() const { return notInitializedStatus(library_); }

int LibraryCall::complete(int status) {
  if (status != 0) return status;
  for (const Pending& p : pending_) {
    session::LibraryObject o{p.type, p.object, p.destroy, &gpu_, 0, {}};
    if (!tenant_.libraryObjects().insert(p.id, o)) {
      // The id was checked before the call: only a full table ends here.
      if (p.destroy != nullptr) p.destroy(p.object);
      spdlog::warn("tenant {}: {}: too many library objects", tenant_.name(), name_);
      return notInitializedStatus(library_);
    }
  }
  return status;
}

void LibraryCall::forgetObjects() {
  for (uint64_t id : named_) tenant_.libraryObjects().erase(id);
}

std::string LibraryCall::outputBytes() const {
  std::string out;
  for (const auto& [p, size] : outputs_) out.append(static_cast<const char*>(p), size);
  out += extra_.bytes();
  return out;
}

// --- handles -----------------------------------------------------------------------------

// A new handle works on the tenant's legacy default stream, never the context's NULL stream
// (which every tenant shares).
int createHandle(LibraryCall& c, const HandleOps& ops) {
  uint64_t id = c.readId();
  uint64_t defaultStream = ops.bindStream != nullptr ? c.readId() : 0;
  session::StreamState* s = ops.bindStream != nullptr ? c.resolveStream(defaultStream) : nullptr;
  if (ops.bindStream != nullptr && s == nullptr) c.refuse("no default stream");
  if (id == 0 || c.tenant().libraryObjects().find(id, ops.type) != nullptr) c.refuse("handle id taken");
  if (c.refused()) return c.refusal();
  void* handle = nullptr;
  if (int status = ops.create(&handle); status != 0) return status;
  if (s != nullptr) ops.bindStream(handle, s->stream);
  session::LibraryObject object{ops.type, handle, ops.destroy, &c.gpu(), defaultStream, {}};
  if (s != nullptr) {
    object.bindStream = ops.bindStream;
    object.boundStream = s->stream;
  }
  if (!c.tenant().libraryObjects().insert(id, std::move(object))) {
    ops.destroy(handle);
    return ops.allocFailed;
  }
  if (ops.version != nullptr) c.extraOutput().put(static_cast<uint64_t>(ops.version()));
  return 0;
}

int destroyHandle(LibraryCall& c, const HandleOps& ops) {
  uint64_t id = c.readId();
  session::LibraryObject* h = c.tenant().libraryObjects().find(id, ops.type);
  if (h == nullptr) c.refuse(fmt::format("{:#x} is not a handle of the tenant", id));
  if (c.refused()) return c.refusal();
  ops.destroy(h->object);
  c.tenant().libraryObjects().erase(id);
  return 0;
}

int setHandleStream(LibraryCall& c, const HandleOps& ops) {
  uint64_t id = c.readId();
  uint64_t streamId = c.readId();
  session::LibraryObject* h = c.tenant().libraryObjects().find(id, ops.type);
  session::StreamState* s = c.resolveStream(streamId);
  if (h == nullptr || s == nullptr) c.refuse(fmt::format("unknown handle {:#x} or stream {:#x}", id, streamId));
  if (c.refused()) return c.refusal();
  h->streamId = streamId;
  int status = ops.bindStream(h->object, s->stream);
  if (status == 0) h->boundStream = s->stream;
  return status;
}

// --- tables ------------------------------------------------------------------------------

const Executor* findExecutor(uint32_t id) {
  static const auto* byId = [] {
    auto* m = new std::unordered_map<uint32_t, const Executor*>();
    // Hand-written executors first: they replace a generated one of the same name.
    for (const auto* table : {&cublasExecutors(), &cublasLtExecutors(), &cudnnExecutors(), &cudnnBackendExecutors(),
                              &cufftExecutors(), &generatedExecutors()}) {
      for (const Executor& e : *table) m->emplace(e.id, &e);
    }
    return m;
  }();
  auto it = byId->find(id);
  return it != byId->end() ? it->second : nullptr;
}

Library libraryOf(const char* name) {
  if (std::strncmp(name, "cublasLt", 8) == 0) return Library::kCublasLt;
  if (std::strncmp(name, "cublas", 6) == 0) return Library::kCublas;
  if (std::strncmp(name, "cufft", 5) == 0) return Library::kCufft;
  return Library::kCudnn;
}

namespace {
// The statuses the dispatcher answers itself, in each library's own enum.
struct LibraryStatuses {
  int notSupported;
  int invalidValue;
  int notInitialized;
};

const LibraryStatuses& statusesOf(Library lib) {
  static constexpr LibraryStatuses kCublas{CUBLAS_STATUS_NOT_SUPPORTED, CUBLAS_STATUS_INVALID_VALUE,
                                           CUBLAS_STATUS_NOT_INITIALIZED};
  static constexpr LibraryStatuses kCudnn{CUDNN_STATUS_NOT_SUPPORTED, CUDNN_STATUS_BAD_PARAM,
                                          CUDNN_STATUS_NOT_INITIALIZED};
  static constexpr LibraryStatuses kCufft{CUFFT_NOT_SUPPORTED, CUFFT_INVALID_VALUE, CUFFT_SETUP_FAILED};
  switch (lib) {
    case Library::kCudnn: return kCudnn;
    case Library::kCufft: return kCufft;
    case Library::kCublas:
    case Library::kCublasLt: break;
  }
  return kCublas;
}
}  // namespace

int notSupportedStatus(Library lib) { return statusesOf(lib).notSupported; }
int invalidValueStatus(Library lib) { return statusesOf(lib).invalidValue; }
int notInitializedStatus(Library lib) { return statusesOf(lib).notInitialized; }

}  // namespace tally::server::library
