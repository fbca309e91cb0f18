// CUDA IPC between processes served by the same tallyd (torch.multiprocessing). A handle is
// 64 random bytes tallyd made for one grant; opening it gives the owner's own address (one
// shared context), usable by this tenant until it closes it or the owner frees the memory.
// Handles mean nothing to another tallyd or to the native driver (docs/security.md).
#include "client/api/api_util.h"

#include <functional>
#include <map>
#include <mutex>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

constexpr size_t kHandleBytes = 64;
static_assert(sizeof(cudaIpcMemHandle_t) == kHandleBytes && sizeof(CUipcMemHandle) == kHandleBytes);
static_assert(sizeof(cudaIpcEventHandle_t) == kHandleBytes && sizeof(CUipcEventHandle) == kHandleBytes);

// Opens per address: tallyd counts them too; the region goes with the last close.
struct Opens {
  std::mutex mutex;
  std::map<CUdeviceptr, unsigned> count;
};
Opens& opens() {
  static auto* o = new Opens();
  return *o;
}

// The handle's 64 bytes come back as the reply's bulk, written into `out` (registered under a
// token, as a device-to-host copy's destination is) before the reply is handed over.
CUresult callForHandle(void* out, const std::function<void(wire::Call::Builder, uint64_t)>& build) {
  Connection& connection = rt().connection();
  uint64_t token = connection.expectHostData(out, kHandleBytes);
  CUresult r = rt().call([&](wire::Call::Builder c) { build(c, token); });
  if (!connection.forgetHostData(token) && r == CUDA_SUCCESS) r = CUDA_ERROR_INVALID_VALUE;
  return r;
}

CUresult getMemHandle(void* out, CUdeviceptr ptr) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  return callForHandle(out, [&](wire::Call::Builder c, uint64_t token) {
    auto g = c.initIpc().initGetMemHandle();
    g.setPtr(ptr);
    g.setToken(token);
  });
}

CUresult openMemHandle(CUdeviceptr* out, const void* handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    c.initIpc().initOpenMemHandle().setHandle(kj::arrayPtr(static_cast<const capnp::byte*>(handle), kHandleBytes));
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  auto opened = reply.reply().getMemInfo();  // (address, size)
  *out = opened.getFree();
  std::lock_guard lock(opens().mutex);
  if (opens().count[*out]++ == 0) rt().addDeviceRegion(*out, {.size = opened.getTotal(), .device = currentDevice()});
  return CUDA_SUCCESS;
}

CUresult closeMemHandle(CUdeviceptr ptr) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initIpc().initCloseMemHandle().setPtr(ptr); });
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard lock(opens().mutex);
  auto it = opens().count.find(ptr);
  if (it != opens().count.end() && --it->second == 0) {
    opens().count.erase(it);
    rt().removeDeviceRegion(ptr);
  }
  return CUDA_SUCCESS;
}

// Natively only an event created with cudaEventInterprocess | cudaEventDisableTiming exports.
CUresult getEventHandle(void* out, CUevent event) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  EventHandle* e = checkedHandle<EventHandle>(event, HandleMagic::kEvent);
  constexpr unsigned kRequired = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  if (e == nullptr || (e->flags & kRequired) != kRequired) return CUDA_ERROR_INVALID_HANDLE;
  return callForHandle(out, [&](wire::Call::Builder c, uint64_t token) {
    auto g = c.initIpc().initGetEventHandle();
    g.setEvent(e->id);
    g.setToken(token);
  });
}

// The event this tenant gets is its own handle (destroyed with cudaEventDestroy) on the
// owner's driver event.
CUresult openEventHandle(CUevent* out, const void* handle) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  auto* e = new EventHandle();
  e->id = rt().newHandleId();
  e->device = currentDevice();
  e->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto o = c.initIpc().initOpenEventHandle();
    o.setHandle(kj::arrayPtr(static_cast<const capnp::byte*>(handle), kHandleBytes));
    o.setEvent(e->id);
  });
  if (r != CUDA_SUCCESS) {
    delete e;
    return r;
  }
  registerHandle(e);
  *out = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

}  // namespace

// --- runtime -----------------------------------------------------------------------------------

TALLY_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  return guardRuntime(__func__, [&] { return getMemHandle(handle, reinterpret_cast<CUdeviceptr>(devPtr)); });
}
TALLY_API cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int) {
  return guardRuntime(__func__, [&] { return openMemHandle(reinterpret_cast<CUdeviceptr*>(devPtr), &handle); });
}
TALLY_API cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  return guardRuntime(__func__, [&] { return closeMemHandle(reinterpret_cast<CUdeviceptr>(devPtr)); });
}
TALLY_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t event) {
  return guardRuntime(__func__, [&] { return getEventHandle(handle, reinterpret_cast<CUevent>(event)); });
}
TALLY_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t* event, cudaIpcEventHandle_t handle) {
  return guardRuntime(__func__, [&] { return openEventHandle(reinterpret_cast<CUevent*>(event), &handle); });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr ptr) {
  return guardDriver(__func__, [&] { return getMemHandle(handle, ptr); });
}
TALLY_API CUresult cuIpcOpenMemHandle(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int) {
  return guardDriver(__func__, [&] { return openMemHandle(ptr, &handle); });
}
TALLY_API CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  return guardDriver(__func__, [&] { return closeMemHandle(ptr); });
}
TALLY_API CUresult cuIpcGetEventHandle(CUipcEventHandle* handle, CUevent event) {
  return guardDriver(__func__, [&] { return getEventHandle(handle, event); });
}
TALLY_API CUresult cuIpcOpenEventHandle(CUevent* event, CUipcEventHandle handle) {
  return guardDriver(__func__, [&] { return openEventHandle(event, &handle); });
}

// --- the export older headers bind to (cuda.h renames cuIpcOpenMemHandle to its _v2) --------
#undef cuIpcOpenMemHandle
TALLY_API CUresult cuIpcOpenMemHandle(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) {
  return cuIpcOpenMemHandle_v2(ptr, handle, flags);
}
