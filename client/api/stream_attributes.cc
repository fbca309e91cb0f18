// Stream attributes (cudaStreamSetAttribute / GetAttribute / CopyAttributes and the driver's):
// kept by the client per stream and answered from there. They are hints that change no result:
// an L2 access policy window would reserve persisting L2 in the context every tenant shares,
// the synchronization policy and memory synchronization domains shape how the GPU and the host
// wait, so none reaches tallyd. The priority is the stream's own (set at creation); changing it
// through an attribute answers NotSupported, logged. Attributes that are not valid for streams
// answer CUDA_ERROR_INVALID_VALUE, as natively. The _ptsz twins are the generated ones
// (client/entry/per_thread_stream.h).
#include "client/api/api_util.h"

#include <cstring>
#include <map>
#include <mutex>

using namespace tally::client;

namespace {

static_assert(sizeof(cudaStreamAttrValue) == sizeof(CUstreamAttrValue));

ClientRuntime& rt() { return ClientRuntime::get(); }

struct StreamAttributes {
  std::mutex mutex;
  std::map<std::pair<uint64_t, int>, CUstreamAttrValue> values;  // (stream id, attribute)
};

StreamAttributes& attributes() {
  static auto* a = new StreamAttributes();
  return *a;
}

bool isStoredAttribute(CUstreamAttrID attr) {
  return attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW || attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY ||
         attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP || attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
}

// What a stream reports before the application set anything (the driver's defaults).
CUstreamAttrValue defaultValue(CUstreamAttrID attr) {
  CUstreamAttrValue v;
  std::memset(&v, 0, sizeof v);
  if (attr == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY) v.syncPolicy = CU_SYNC_POLICY_AUTO;
  if (attr == CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP) v.memSyncDomainMap.remote = 1;
  return v;
}

CUresult streamKey(CUstream stream, uint64_t& id) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  int priority = 0;
  if (CUresult r = streamPriority(stream, priority); r != CUDA_SUCCESS) return r;
  id = rt().streamId(stream);
  return id == 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

CUresult getAttribute(CUstream stream, CUstreamAttrID attr, CUstreamAttrValue* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult r = streamKey(stream, id); r != CUDA_SUCCESS) return r;
  if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
    std::memset(value, 0, sizeof *value);
    return streamPriority(stream, value->priority);
  }
  if (!isStoredAttribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(attributes().mutex);
  auto it = attributes().values.find({id, attr});
  *value = it != attributes().values.end() ? it->second : defaultValue(attr);
  return CUDA_SUCCESS;
}

CUresult setAttribute(CUstream stream, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult r = streamKey(stream, id); r != CUDA_SUCCESS) return r;
  if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
    spdlog::warn("tally: changing a stream's priority through its attributes is not supported (create the stream "
                 "with the priority); returning NotSupported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!isStoredAttribute(attr)) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(attributes().mutex);
  attributes().values[{id, attr}] = *value;
  return CUDA_SUCCESS;
}

CUresult copyAttributes(CUstream dst, CUstream src) {
  uint64_t dstId = 0, srcId = 0;
  if (CUresult r = streamKey(dst, dstId); r != CUDA_SUCCESS) return r;
  if (CUresult r = streamKey(src, srcId); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(attributes().mutex);
  auto& values = attributes().values;
  for (int attr : {CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
                   CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN}) {
    auto from = values.find({srcId, attr});
    if (from != values.end()) {
      values[{dstId, attr}] = from->second;
    } else {
      values.erase({dstId, attr});
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace tally::client {

void forgetStreamAttributes(uint64_t stream) {
  std::lock_guard lock(attributes().mutex);
  auto& values = attributes().values;
  values.erase(values.lower_bound({stream, 0}), values.lower_bound({stream + 1, 0}));
}

}  // namespace tally::client

TALLY_API cudaError_t cudaStreamGetAttribute(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue* value) {
  return guardRuntime(__func__, [&] {
    return getAttribute(stream, static_cast<CUstreamAttrID>(attr), reinterpret_cast<CUstreamAttrValue*>(value));
  });
}
TALLY_API cudaError_t cudaStreamSetAttribute(cudaStream_t stream, cudaStreamAttrID attr,
                                            const cudaStreamAttrValue* value) {
  return guardRuntime(__func__, [&] {
    return setAttribute(stream, static_cast<CUstreamAttrID>(attr), reinterpret_cast<const CUstreamAttrValue*>(value));
  });
}
TALLY_API cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src) {
  return guardRuntime(__func__, [&] { return copyAttributes(dst, src); });
}

TALLY_API CUresult cuStreamGetAttribute(CUstream stream, CUstreamAttrID attr, CUstreamAttrValue* value) {
  return guardDriver(__func__, [&] { return getAttribute(stream, attr, value); });
}
TALLY_API CUresult cuStreamSetAttribute(CUstream stream, CUstreamAttrID attr, const CUstreamAttrValue* value) {
  return guardDriver(__func__, [&] { return setAttribute(stream, attr, value); });
}
TALLY_API CUresult cuStreamCopyAttributes(CUstream dst, CUstream src) {
  return guardDriver(__func__, [&] { return copyAttributes(dst, src); });
}
