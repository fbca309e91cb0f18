// The cuDNN backend (graph) API, which PyTorch uses for convolutions through cudnn-frontend.
// Backend descriptors are tallyd objects under ids chosen here, so creating, setting and
// destroying them are one-way messages; finalize is a round trip (cudnn-frontend tries engine
// configurations and keeps the ones whose plan finalizes), except for variant packs, whose
// finalize and execute go one-way: an execute in steady state costs no round trip.
//
// The one attribute that cannot go as it is set: a variant pack's data pointers. A tensor marked
// by-value (CUDNN_ATTR_TENSOR_IS_BY_VALUE, e.g. a norm's epsilon) has a *host* pointer there, to
// bytes tallyd must receive; which unique ids are by-value is learned from the tensors the
// application finalized, and the pointers are sent at the variant pack's finalize, when its
// unique ids are known whatever order they were set in.
#include "client/api/api_util.h"
#include "client/entry/not_supported.h"
#include "client/library/library_call.h"
#include "client/runtime/client_runtime.h"
#include "client/transport/host_memory.h"
#include "common/library/cudnn_attributes.h"

#include <cudnn.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

using tally::client::ClientRuntime;
using namespace tally::client::library;
using namespace tally::library;

namespace {

constexpr Family kFamily = Family::kCudnn;

struct BackendDescriptor {
  int32_t type = 0;
  // Tensors: what decides whether the variant pack passes the tensor by value.
  bool byValue = false;
  int64_t uniqueId = 0;
  bool hasUniqueId = false;
  // Variant packs: held until finalize.
  std::vector<int64_t> uniqueIds;
  std::vector<uint64_t> dataPointers;
  bool hasDataPointers = false;
};

struct BackendState {
  std::mutex mutex;
  std::unordered_map<uint64_t, BackendDescriptor> descriptors;
  std::unordered_set<int64_t> byValueIds;
};

BackendState& state() {
  static auto* s = new BackendState();
  return *s;
}

uint64_t idOf(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

bool copyElements(const void* elements, int64_t count, int size, std::string& out) {
  out.resize(static_cast<size_t>(count) * size);
  return count == 0 || (elements != nullptr && tally::client::host_memory::copyIn(out.data(), elements, out.size()));
}

// The attribute as tallyd reads it: descriptor and handle elements as ids (they are ids already),
// addresses tagged with where they point, everything else as raw bytes.
void putElements(Call& c, int32_t type, const std::string& raw, int64_t count,
                 const std::unordered_set<size_t>& hostElements = {}) {
  if (type != kCudnnTypeVoidPtr) {
    c.args().putBytes(raw.data(), static_cast<uint32_t>(raw.size()));
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    uint64_t address = 0;
    std::memcpy(&address, raw.data() + i * sizeof address, sizeof address);
    if (hostElements.count(static_cast<size_t>(i)) == 0 || address == 0) {
      c.value(ScalarPlace::kDevice);
      c.value(address);
      continue;
    }
    c.value(ScalarPlace::kHost);
    c.hostScalar(reinterpret_cast<const void*>(address));
  }
}

cudnnStatus_t sendSet(uint64_t id, uint32_t name, int32_t type, int64_t count, const std::string& raw,
                      const std::unordered_set<size_t>& hostElements = {}) {
  Call c(kFamily, "cudnnBackendSetAttribute", functionId("cudnnBackendSetAttribute"));
  c.value(id);
  c.value(name);
  c.value(type);
  c.value(count);
  putElements(c, type, raw, count, hostElements);
  return static_cast<cudnnStatus_t>(c.run(true));
}

// Remembers what the client must know of a descriptor's attributes; false: hold it back.
bool track(BackendDescriptor& d, uint32_t name, const std::string& raw) {
  if (d.type == kCudnnBackendTensor) {
    if (name == kCudnnAttrTensorIsByValue && !raw.empty()) d.byValue = raw[0] != 0;
    if (name == kCudnnAttrTensorUniqueId && raw.size() == sizeof(int64_t)) {
      std::memcpy(&d.uniqueId, raw.data(), sizeof d.uniqueId);
      d.hasUniqueId = true;
    }
  }
  if (d.type == kCudnnBackendVariantPack) {
    if (name == kCudnnAttrVariantPackUniqueIds) {
      d.uniqueIds.resize(raw.size() / sizeof(int64_t));
      std::memcpy(d.uniqueIds.data(), raw.data(), d.uniqueIds.size() * sizeof(int64_t));
    }
    if (name == kCudnnAttrVariantPackDataPointers) {
      d.dataPointers.resize(raw.size() / sizeof(uint64_t));
      std::memcpy(d.dataPointers.data(), raw.data(), d.dataPointers.size() * sizeof(uint64_t));
      d.hasDataPointers = true;
      return false;
    }
  }
  return true;
}

}  // namespace

TALLY_API cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                                     cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (ClientRuntime::get().ready() != CUDA_SUCCESS) return CUDNN_STATUS_NOT_INITIALIZED;
  uint64_t id = Call::newObjectId();
  Call c(kFamily, "cudnnBackendCreateDescriptor", functionId("cudnnBackendCreateDescriptor"));
  c.value(static_cast<int32_t>(type));
  c.value(id);
  if (int status = c.run(true); status != CUDNN_STATUS_SUCCESS) return static_cast<cudnnStatus_t>(status);
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().descriptors[id].type = type;
  }
  *descriptor = reinterpret_cast<cudnnBackendDescriptor_t>(id);
  return CUDNN_STATUS_SUCCESS;
}

// Re-initializes a descriptor in place: cuDNN 9 keeps it only for compatibility, and cudnn-frontend
// and PyTorch never call it. Refused (logged once) rather than left to the application's own
// cuDNN, which has no GPU to talk to.
TALLY_API cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t) {
  tally::client::reportNotSupported("cudnnBackendInitialize");
  return CUDNN_STATUS_NOT_SUPPORTED;
}

TALLY_API cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    if (state().descriptors.erase(idOf(descriptor)) == 0) return CUDNN_STATUS_BAD_PARAM;
  }
  Call c(kFamily, "cudnnBackendDestroyDescriptor", functionId("cudnnBackendDestroyDescriptor"));
  c.value(idOf(descriptor));
  return static_cast<cudnnStatus_t>(c.run(true));
}

TALLY_API cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                                 cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                                 int64_t count, const void* elements) {
  int size = cudnnElementSize(type);
  if (size < 0) return CUDNN_STATUS_NOT_SUPPORTED;
  if (count < 0 || count > kMaxCudnnElements) return CUDNN_STATUS_BAD_PARAM;
  std::string raw;
  if (!copyElements(elements, count, size, raw)) return CUDNN_STATUS_BAD_PARAM;
  uint64_t id = idOf(descriptor);
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    auto it = state().descriptors.find(id);
    if (it == state().descriptors.end()) return CUDNN_STATUS_BAD_PARAM;
    if (!track(it->second, name, raw)) return CUDNN_STATUS_SUCCESS;
  }
  return sendSet(id, name, type, count, raw);
}

TALLY_API cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
  uint64_t id = idOf(descriptor);
  BackendDescriptor d;
  std::unordered_set<size_t> hostElements;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    auto it = state().descriptors.find(id);
    if (it == state().descriptors.end()) return CUDNN_STATUS_BAD_PARAM;
    d = it->second;
    if (d.type == kCudnnBackendTensor && d.byValue && d.hasUniqueId) state().byValueIds.insert(d.uniqueId);
    for (size_t i = 0; i < d.uniqueIds.size(); ++i) {
      if (state().byValueIds.count(d.uniqueIds[i]) != 0) hostElements.insert(i);
    }
  }
  bool variantPack = d.type == kCudnnBackendVariantPack;
  if (variantPack && d.hasDataPointers) {
    std::string raw(reinterpret_cast<const char*>(d.dataPointers.data()), d.dataPointers.size() * sizeof(uint64_t));
    if (cudnnStatus_t st = sendSet(id, kCudnnAttrVariantPackDataPointers, kCudnnTypeVoidPtr,
                                   static_cast<int64_t>(d.dataPointers.size()), raw, hostElements);
        st != CUDNN_STATUS_SUCCESS) {
      return st;
    }
  }
  Call c(kFamily, "cudnnBackendFinalize", functionId("cudnnBackendFinalize"));
  c.value(id);
  return static_cast<cudnnStatus_t>(c.run(variantPack));
}

TALLY_API cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                                 cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                                                 int64_t requestedCount, int64_t* elementCount, void* elements) {
  int size = cudnnElementSize(type);
  if (size < 0 || static_cast<int32_t>(type) == kCudnnTypeHandle) return CUDNN_STATUS_NOT_SUPPORTED;
  if (requestedCount < 0 || requestedCount > kMaxCudnnElements) return CUDNN_STATUS_BAD_PARAM;
  if (elements == nullptr) requestedCount = 0;
  Call c(kFamily, "cudnnBackendGetAttribute", functionId("cudnnBackendGetAttribute"));
  c.value(idOf(descriptor));
  c.value(static_cast<uint32_t>(name));
  c.value(static_cast<int32_t>(type));
  c.value(requestedCount);
  // Descriptors to be filled are the application's own, named by id; tallyd fills its objects.
  if (static_cast<int32_t>(type) == kCudnnTypeBackendDescriptor) {
    std::string ids;
    if (!copyElements(elements, requestedCount, size, ids)) return CUDNN_STATUS_BAD_PARAM;
    c.args().putBytes(ids.data(), static_cast<uint32_t>(ids.size()));
  }
  int status = c.run(false);
  if (status != CUDNN_STATUS_SUCCESS) return static_cast<cudnnStatus_t>(status);
  const std::string& out = c.replyBytes();
  int64_t count = 0;
  if (out.size() < sizeof count) return CUDNN_STATUS_INTERNAL_ERROR;
  std::memcpy(&count, out.data(), sizeof count);
  if (elementCount != nullptr) *elementCount = count;
  size_t bytes = out.size() - sizeof count;
  if (bytes > static_cast<size_t>(requestedCount) * size) return CUDNN_STATUS_INTERNAL_ERROR;
  if (bytes > 0 && !tally::client::host_memory::copyOut(elements, out.data() + sizeof count, bytes)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

TALLY_API cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                            cudnnBackendDescriptor_t variantPack) {
  Call c(kFamily, "cudnnBackendExecute", functionId("cudnnBackendExecute"));
  c.handle(handle);
  c.value(idOf(executionPlan));
  c.value(idOf(variantPack));
  return static_cast<cudnnStatus_t>(c.run(true));
}
