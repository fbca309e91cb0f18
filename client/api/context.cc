// Context family: the driver API's contexts and the profiler switches. tallyd runs every tenant
// in one shared context per GPU, so a context here is the client's name for a device: the
// primary context of each device, and contexts the application creates (cuCtxCreate), which
// run their work in the tenant's one namespace on that GPU. What a created context does not
// give that a native one does — its own modules, streams and memory, freed when it is
// destroyed — is listed in docs/compatibility.md and the README.
#include "client/api/api_util.h"
#include "client/api/context_storage.h"
#include "client/api/peer_access.h"

#include <cudaProfiler.h>
#include <cuda_profiler_api.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

using namespace tally::client;

namespace {

struct ContextRecord {
  int device;
  unsigned int flags;
  unsigned long long id;
};

// The primary contexts live as long as the process; created ones until cuCtxDestroy. Handles are
// the records' addresses, looked up before use, so a destroyed handle is refused, not followed.
class Contexts {
 public:
  static Contexts& get() {
    static auto* contexts = new Contexts();  // used by threads still running at exit
    return *contexts;
  }

  CUcontext primary(int device) { return reinterpret_cast<CUcontext>(&primary_[device]); }

  CUcontext create(int device, unsigned int flags) {
    auto record = std::make_unique<ContextRecord>(ContextRecord{device, flags, nextId_++});
    CUcontext handle = reinterpret_cast<CUcontext>(record.get());
    std::lock_guard lock(mutex_);
    created_.emplace(handle, std::move(record));
    return handle;
  }

  bool destroy(CUcontext ctx) {
    std::lock_guard lock(mutex_);
    return created_.erase(ctx) == 1;
  }

  // A copy of the context's record, or nullopt for a handle that is no live context.
  std::optional<ContextRecord> find(CUcontext ctx) {
    auto* p = reinterpret_cast<ContextRecord*>(ctx);
    if (p >= primary_ && p < primary_ + kMaxDevices) return *p;
    std::lock_guard lock(mutex_);
    auto it = created_.find(ctx);
    if (it == created_.end()) return std::nullopt;
    return *it->second;
  }

  bool setFlags(CUcontext ctx, unsigned int flags) {
    auto* p = reinterpret_cast<ContextRecord*>(ctx);
    std::lock_guard lock(mutex_);
    if (p >= primary_ && p < primary_ + kMaxDevices) {
      p->flags = flags;
      return true;
    }
    auto it = created_.find(ctx);
    if (it == created_.end()) return false;
    it->second->flags = flags;
    return true;
  }

 private:
  Contexts() {
    for (int d = 0; d < kMaxDevices; ++d) primary_[d] = {d, 0, nextId_++};
  }

  ContextRecord primary_[kMaxDevices];
  std::atomic<unsigned long long> nextId_{1};
  std::mutex mutex_;
  std::unordered_map<CUcontext, std::unique_ptr<ContextRecord>> created_;
};

CUcontext currentContext() {
  ThreadState& t = threadState();
  return t.contextStack.empty() ? Contexts::get().primary(t.device) : t.contextStack.back();
}

// Makes `ctx` the thread's current context: its device becomes the thread's device.
CUresult makeCurrent(CUcontext ctx, bool push) {
  std::optional<ContextRecord> c = Contexts::get().find(ctx);
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  ThreadState& t = threadState();
  if (push || t.contextStack.empty()) {
    t.contextStack.push_back(ctx);
  } else {
    t.contextStack.back() = ctx;
  }
  t.device = c->device;
  return CUDA_SUCCESS;
}

CUresult popCurrent(CUcontext* ctx) {
  ThreadState& t = threadState();
  if (t.contextStack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = t.contextStack.back();
  t.contextStack.pop_back();
  if (!t.contextStack.empty()) {
    if (std::optional<ContextRecord> c = Contexts::get().find(t.contextStack.back())) t.device = c->device;
  }
  return CUDA_SUCCESS;
}

// cuCtxCreate in every version: a new context on `device`, pushed on the calling thread's stack.
CUresult createContext(CUcontext* pctx, unsigned int flags, CUdevice device) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
  CUcontext ctx = Contexts::get().create(device, flags);
  *pctx = ctx;
  return makeCurrent(ctx, true);
}

}  // namespace

// --- primary contexts ------------------------------------------------------------------------

TALLY_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  return guardDriver(__func__, [&] {
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    *ctx = Contexts::get().primary(device);
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDevicePrimaryCtxRelease(CUdevice device) { return validDevice(device); }
// A runtime linked into the application keeps its state of the context in context-local
// storage: released here, it builds it anew (modules included) on its next call.
TALLY_API CUresult cuDevicePrimaryCtxReset(CUdevice device) {
  return guardDriver(__func__, [&] {
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    CUresult r = resetDevice(static_cast<uint32_t>(device));
    tally::client::context_storage::release(Contexts::get().primary(device));
    return r;
  });
}
TALLY_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice device, unsigned int) { return validDevice(device); }

TALLY_API CUresult cuDevicePrimaryCtxGetState(CUdevice device, unsigned int* flags, int* active) {
  return guardDriver(__func__, [&] {
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    if (flags != nullptr) *flags = 0;
    if (active != nullptr) *active = 1;
    return CUDA_SUCCESS;
  });
}

// --- created contexts --------------------------------------------------------------------------

TALLY_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice device) {
  return guardDriver(__func__, [&] { return createContext(pctx, flags, device); });
}

// Execution-affinity parameters (an SM count) are not applied: the tenant's work shares the GPU
// as tallyd's scheduler decides.
TALLY_API CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int flags, CUdevice device) {
  return guardDriver(__func__, [&] { return createContext(pctx, flags, device); });
}

// CUDA 13's cuCtxCreate: the parameters (affinity, CIG) are not applied, as above.
TALLY_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int flags, CUdevice device) {
  return guardDriver(__func__, [&] { return createContext(pctx, flags, device); });
}

// Waits for the tenant's work on the context's device (as destroying a context waits for its
// work), forgets the handle and pops it if it is current on this thread.
TALLY_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return guardDriver(__func__, [&] {
    std::optional<ContextRecord> c = Contexts::get().find(ctx);
    if (!c || ctx == Contexts::get().primary(c->device)) return CUDA_ERROR_INVALID_CONTEXT;
    ThreadState& t = threadState();
    int device = t.device;
    t.device = c->device;
    CUresult r = synchronizeDevice();
    t.device = device;
    tally::client::context_storage::release(ctx);
    Contexts::get().destroy(ctx);
    if (!t.contextStack.empty() && t.contextStack.back() == ctx) popCurrent(nullptr);
    return r;
  });
}


// --- the current context -----------------------------------------------------------------------

TALLY_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = currentContext();
  return CUDA_SUCCESS;
}

// NULL unbinds the current context, as natively.
TALLY_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx == nullptr) {
    popCurrent(nullptr);
    return CUDA_SUCCESS;
  }
  return makeCurrent(ctx, false);
}

TALLY_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return makeCurrent(ctx, true); }
TALLY_API CUresult cuCtxPopCurrent_v2(CUcontext* ctx) { return popCurrent(ctx); }

TALLY_API CUresult cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *device = threadState().device;
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuCtxSynchronize() { return guardDriver(__func__, [] { return synchronizeDevice(); }); }

// CUDA 13: the context to ask about is an argument (null: the current one).
TALLY_API CUresult cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (ctx == nullptr) return cuCtxGetDevice(device);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<ContextRecord> record = Contexts::get().find(ctx);
  if (!record) return CUDA_ERROR_INVALID_CONTEXT;
  *device = record->device;
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  return guardDriver(__func__, [&] {
    if (ctx == nullptr) return synchronizeDevice();
    std::optional<ContextRecord> record = Contexts::get().find(ctx);
    return record ? synchronizeDevice(static_cast<uint32_t>(record->device)) : CUDA_ERROR_INVALID_CONTEXT;
  });
}

TALLY_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx != nullptr && !Contexts::get().find(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 3020;
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<ContextRecord> c = Contexts::get().find(currentContext());
  *flags = c ? c->flags : 0;
  return CUDA_SUCCESS;
}

// Kept for cuCtxGetFlags; the scheduling flags do not change how tallyd waits.
TALLY_API CUresult cuCtxSetFlags(unsigned int flags) {
  return Contexts::get().setFlags(currentContext(), flags) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

TALLY_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::optional<ContextRecord> c = Contexts::get().find(ctx != nullptr ? ctx : currentContext());
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *id = c->id;
  return CUDA_SUCCESS;
}

// Peer access between contexts is access between their devices (peer_access.h).
TALLY_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  return guardDriver(__func__, [&] {
    std::optional<ContextRecord> self = Contexts::get().find(currentContext());
    std::optional<ContextRecord> other = Contexts::get().find(peer);
    if (!self || !other) return CUDA_ERROR_INVALID_CONTEXT;
    return enablePeerAccess(self->device, other->device, flags);
  });
}

TALLY_API CUresult cuCtxDisablePeerAccess(CUcontext peer) {
  return guardDriver(__func__, [&] {
    std::optional<ContextRecord> self = Contexts::get().find(currentContext());
    std::optional<ContextRecord> other = Contexts::get().find(peer);
    if (!self || !other) return CUDA_ERROR_INVALID_CONTEXT;
    return disablePeerAccess(self->device, other->device);
  });
}

// --- the exports older headers bind to (cuda.h renames these names to their newest version) ---
#undef cuCtxCreate
#undef cuCtxDestroy
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

TALLY_API CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice device) {
  return guardDriver(__func__, [&] { return createContext(pctx, flags, device); });
}
TALLY_API CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
TALLY_API CUresult cuCtxPushCurrent(CUcontext ctx) { return makeCurrent(ctx, true); }
TALLY_API CUresult cuCtxPopCurrent(CUcontext* ctx) { return popCurrent(ctx); }
// The first generation differs only in what a release to zero does to a context in use; the
// primary contexts here live as long as the process, so both generations answer alike.
TALLY_API CUresult cuDevicePrimaryCtxRelease(CUdevice device) { return cuDevicePrimaryCtxRelease_v2(device); }
TALLY_API CUresult cuDevicePrimaryCtxReset(CUdevice device) { return cuDevicePrimaryCtxReset_v2(device); }

// --- profiler ------------------------------------------------------------------------------------

// Natively these succeed when no profiler is attached; a profiler cannot attach to the client.
TALLY_API CUresult cuProfilerStart() { return CUDA_SUCCESS; }
TALLY_API CUresult cuProfilerStop() { return CUDA_SUCCESS; }
TALLY_API cudaError_t cudaProfilerStart() { return cudaSuccess; }
TALLY_API cudaError_t cudaProfilerStop() { return cudaSuccess; }
