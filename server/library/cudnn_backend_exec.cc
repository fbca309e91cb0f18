// The cuDNN backend API (client/library/cudnn_backend.cc explains the layout). Descriptor ids
// are the tenant's; descriptor-valued attributes are mapped to the tenant's objects, handles to
// its cuDNN handles, addresses checked against its memory, and the host bytes of by-value tensors
// kept alive with the variant pack that points at them.
#include "common/library/cudnn_attributes.h"
#include "server/library/library_call.h"
#include "server/session/tenant.h"

#include <cudnn.h>
#include <fmt/format.h>

#include <cstring>
#include <deque>

namespace tally::server::library {
namespace {

using namespace tally::library;

constexpr uint32_t kBackendType = functionId("cudnnBackendDescriptor_t");

template <typename Fn>
Fn cudnn(const char* name) {
  return resolve<Fn>(Library::kCudnn, name);
}

void destroyDescriptor(void* d) {
  static auto* fn = cudnn<decltype(&::cudnnBackendDestroyDescriptor)>("cudnnBackendDestroyDescriptor");
  if (fn != nullptr) fn(static_cast<cudnnBackendDescriptor_t>(d));
}

session::LibraryObject* descriptor(LibraryCall& c, uint64_t id) {
  session::LibraryObject* d = c.tenant().libraryObjects().find(id, kBackendType);
  if (d == nullptr) c.refuse(fmt::format("backend descriptor {:#x} is not the tenant's", id));
  return d;
}

int create(LibraryCall& c) {
  auto type = c.reader().get<int32_t>();
  uint64_t id = c.readId();
  if (id == 0 || c.tenant().libraryObjects().find(id, kBackendType) != nullptr) c.refuse("descriptor id taken");
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnBackendCreateDescriptor)>("cudnnBackendCreateDescriptor");
  if (fn == nullptr) return c.missing();
  cudnnBackendDescriptor_t d = nullptr;
  if (cudnnStatus_t st = fn(static_cast<cudnnBackendDescriptorType_t>(type), &d); st != CUDNN_STATUS_SUCCESS) return st;
  if (!c.tenant().libraryObjects().insert(id, {kBackendType, d, &destroyDescriptor, &c.gpu(), 0, {}})) {
    destroyDescriptor(d);
    return CUDNN_STATUS_ALLOC_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

int destroy(LibraryCall& c) {
  uint64_t id = c.readId();
  session::LibraryObject* d = descriptor(c, id);
  if (c.refused()) return c.refusal();
  destroyDescriptor(d->object);
  c.tenant().libraryObjects().erase(id);
  return CUDNN_STATUS_SUCCESS;
}

// Reads `count` elements of `type` into `out` (8-byte slots for ids and addresses, the
// application's layout otherwise); host bytes of by-value tensors land in `hostBytes`.
void readElements(LibraryCall& c, int32_t type, int64_t count, std::string& out,
                  std::deque<std::array<uint8_t, 16>>& hostBytes) {
  auto& in = c.reader();
  if (type == kCudnnTypeVoidPtr) {
    out.resize(static_cast<size_t>(count) * sizeof(void*));
    for (int64_t i = 0; i < count; ++i) {
      void* p = nullptr;
      if (in.get<ScalarPlace>() == ScalarPlace::kDevice) {
        p = c.ownedRange(c.readId(), 1, "backend attribute address");
      } else {
        const uint8_t* bytes = nullptr;
        uint32_t size = 0;
        in.getBytes(bytes, size);
        hostBytes.emplace_back();
        std::memcpy(hostBytes.back().data(), bytes, std::min<size_t>(size, 16));
        p = hostBytes.back().data();
      }
      std::memcpy(out.data() + i * sizeof p, &p, sizeof p);
    }
    return;
  }
  const uint8_t* bytes = nullptr;
  uint32_t size = 0;
  in.getBytes(bytes, size);
  if (static_cast<int64_t>(size) != count * cudnnElementSize(type)) {
    c.refuse("attribute bytes do not match its count");
    return;
  }
  out.assign(reinterpret_cast<const char*>(bytes), size);
  if (type != kCudnnTypeBackendDescriptor && type != kCudnnTypeHandle) return;
  // Ids become the tenant's objects.
  for (int64_t i = 0; i < count; ++i) {
    uint64_t id = 0;
    std::memcpy(&id, out.data() + i * sizeof id, sizeof id);
    session::LibraryObject* o = c.tenant().libraryObjects().find(id, type == kCudnnTypeHandle ? kCudnnHandleType : kBackendType);
    void* object = o != nullptr ? o->object : nullptr;
    if (o == nullptr && id != 0) c.refuse(fmt::format("attribute element {:#x} is not the tenant's", id));
    std::memcpy(out.data() + i * sizeof object, &object, sizeof object);
  }
}

int setAttribute(LibraryCall& c) {
  uint64_t id = c.readId();
  auto name = c.reader().get<uint32_t>();
  auto type = c.reader().get<int32_t>();
  auto count = c.reader().get<int64_t>();
  session::LibraryObject* d = descriptor(c, id);
  if (cudnnElementSize(type) < 0 || count < 0 || count > kMaxCudnnElements) {
    c.refuse("unknown attribute type or count");
    return c.refusal();
  }
  std::string elements;
  auto hostBytes = std::make_shared<std::deque<std::array<uint8_t, 16>>>();
  readElements(c, type, count, elements, *hostBytes);
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnBackendSetAttribute)>("cudnnBackendSetAttribute");
  if (fn == nullptr) return c.missing();
  cudnnStatus_t st = fn(static_cast<cudnnBackendDescriptor_t>(d->object), static_cast<cudnnBackendAttributeName_t>(name),
                        static_cast<cudnnBackendAttributeType_t>(type), count, elements.data());
  if (st == CUDNN_STATUS_SUCCESS && !hostBytes->empty()) d->keepalive = hostBytes;
  return st;
}

int finalize(LibraryCall& c) {
  session::LibraryObject* d = descriptor(c, c.readId());
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnBackendFinalize)>("cudnnBackendFinalize");
  if (fn == nullptr) return c.missing();
  return fn(static_cast<cudnnBackendDescriptor_t>(d->object));
}

// Replies the element count, then the elements (none for descriptor arrays: the application's
// descriptors were filled in place, here).
int getAttribute(LibraryCall& c) {
  session::LibraryObject* d = descriptor(c, c.readId());
  auto name = c.reader().get<uint32_t>();
  auto type = c.reader().get<int32_t>();
  auto requested = c.reader().get<int64_t>();
  int size = cudnnElementSize(type);
  if (size < 0 || type == kCudnnTypeHandle || requested < 0 || requested > kMaxCudnnElements) {
    c.refuse("unknown attribute type or count");
  }
  std::string elements(static_cast<size_t>(std::max<int64_t>(requested, 0)) * std::max(size, 0), '\0');
  std::deque<std::array<uint8_t, 16>> unused;
  if (type == kCudnnTypeBackendDescriptor && size > 0) readElements(c, type, requested, elements, unused);
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnBackendGetAttribute)>("cudnnBackendGetAttribute");
  if (fn == nullptr) return c.missing();
  int64_t count = 0;
  cudnnStatus_t st = fn(static_cast<cudnnBackendDescriptor_t>(d->object), static_cast<cudnnBackendAttributeName_t>(name),
                        static_cast<cudnnBackendAttributeType_t>(type), requested, &count,
                        requested == 0 ? nullptr : elements.data());
  if (st != CUDNN_STATUS_SUCCESS) return st;
  c.extraOutput().put(count);
  if (type != kCudnnTypeBackendDescriptor) {
    c.extraOutput().bytes().append(elements.data(), static_cast<size_t>(std::min(count, requested)) * size);
  }
  return CUDNN_STATUS_SUCCESS;
}

int execute(LibraryCall& c) {
  auto h = static_cast<cudnnHandle_t>(c.handle(kCudnnHandleType));
  session::LibraryObject* plan = descriptor(c, c.readId());
  session::LibraryObject* pack = descriptor(c, c.readId());
  if (c.refused()) return c.refusal();
  static auto* fn = cudnn<decltype(&::cudnnBackendExecute)>("cudnnBackendExecute");
  if (fn == nullptr) return c.missing();
  return fn(h, static_cast<cudnnBackendDescriptor_t>(plan->object), static_cast<cudnnBackendDescriptor_t>(pack->object));
}

}  // namespace

const std::vector<Executor>& cudnnBackendExecutors() {
  static const std::vector<Executor> table = {
      {functionId("cudnnBackendCreateDescriptor"), "cudnnBackendCreateDescriptor", &create},
      {functionId("cudnnBackendDestroyDescriptor"), "cudnnBackendDestroyDescriptor", &destroy},
      {functionId("cudnnBackendSetAttribute"), "cudnnBackendSetAttribute", &setAttribute},
      {functionId("cudnnBackendFinalize"), "cudnnBackendFinalize", &finalize},
      {functionId("cudnnBackendGetAttribute"), "cudnnBackendGetAttribute", &getAttribute},
      {functionId("cudnnBackendExecute"), "cudnnBackendExecute", &execute, true},
  };
  return table;
}

}  // namespace tally::server::library
