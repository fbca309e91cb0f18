// CUDA IPC between tenants of one tallyd (torch.multiprocessing). All tenants share one context,
// so the receiver gets the owner's very address; what IPC adds is permission (ipc_registry.h):
// the owner exports exactly one of its allocations (or events) under a random 64-byte handle,
// and a tenant presenting that handle may then use that range (MemoryTable import: never owned,
// so it cannot free or export it; gone when the owner frees it or leaves; quota stays the
// owner's) or wait on that event.
#include "server/api/call_context.h"

#include <spdlog/spdlog.h>

namespace tally::server::api {

namespace {

// The handle travels as the reply's bulk bytes, into the buffer the client registered under
// `token` (as device-to-host bytes do), so the Reply union needs no member for it.
void replyWithHandle(CallContext& ctx, const session::IpcHandleBytes& handle, uint64_t token) {
  auto bytes = std::make_shared<session::IpcHandleBytes>(handle);
  ctx.replyLaterWithData()(CUDA_SUCCESS, {iovec{bytes->data(), bytes->size()}}, token, bytes);
}

std::span<const uint8_t> handleBytes(capnp::Data::Reader data) { return {data.begin(), data.size()}; }

// The allocation containing `ptr`, as natively; one grant per allocation, so exporting it again
// gives the same handle.
void getMemHandle(CallContext& ctx, uint64_t ptr, uint64_t token) {
  session::Tenant& t = ctx.tenant();
  auto allocation = t.memory().allocationContaining(ptr);
  if (!allocation) {
    spdlog::warn("tenant {} ({}): cudaIpcGetMemHandle(0x{:x}) refused: not an allocation of this tenant", t.id(),
                 t.name(), ptr);
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  auto& [base, range] = *allocation;
  if (!range->grant) {
    auto grant = std::make_shared<session::IpcMemoryGrant>();
    grant->owner = t.id();
    grant->base = base;
    grant->size = range->size;
    grant->gpu = range->gpu;
    ctx.services().ipc.publish(grant);
    range->grant = std::move(grant);
  }
  replyWithHandle(ctx, range->grant->handle, token);
}

void openMemHandle(CallContext& ctx, capnp::Data::Reader handle) {
  session::Tenant& t = ctx.tenant();
  std::shared_ptr<session::IpcMemoryGrant> grant = ctx.services().ipc.memory(handleBytes(handle));
  if (grant == nullptr) {
    spdlog::warn("tenant {} ({}): cudaIpcOpenMemHandle refused: no live grant has this handle", t.id(), t.name());
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  // Natively a process cannot open its own handle.
  if (grant->owner == t.id()) return ctx.finish(CUDA_ERROR_INVALID_CONTEXT);
  t.memory().addImport(grant);
  spdlog::debug("tenant {} ({}) opened 0x{:x} (+{}) of tenant {}", t.id(), t.name(), grant->base, grant->size,
                grant->owner);
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto opened = reply.initMemInfo();  // (address, size) ride in MemInfo's two fields
    opened.setFree(grant->base);
    opened.setTotal(grant->size);
  });
}

void closeMemHandle(CallContext& ctx, uint64_t ptr) {
  session::Tenant& t = ctx.tenant();
  if (t.memory().closeImport(ptr)) return ctx.finish(CUDA_SUCCESS);
  spdlog::warn("tenant {} ({}): cudaIpcCloseMemHandle(0x{:x}) refused: not opened by this tenant", t.id(), t.name(), ptr);
  ctx.finish(CUDA_ERROR_INVALID_VALUE);
}

// The event's driver object becomes shared (stream_table.h): the owner and every receiver hold
// it, and it goes with the last of them.
void getEventHandle(CallContext& ctx, uint64_t id, uint64_t token) {
  session::Tenant& t = ctx.tenant();
  session::EventState* e = t.streams().event(id);
  if (e == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (!e->grant) {
    if (!e->shared) {
      gpu::Gpu* g = e->gpu;
      e->shared = std::shared_ptr<CUevent_st>(e->event, [g](CUevent event) {
        g->makeCurrent();
        cuEventDestroy(event);
      });
    }
    auto grant = std::make_shared<session::IpcEventGrant>();
    grant->owner = t.id();
    grant->gpu = e->gpu;
    grant->event = e->shared;
    ctx.services().ipc.publish(grant);
    e->grant = std::move(grant);
  }
  replyWithHandle(ctx, e->grant->handle, token);
}

void openEventHandle(CallContext& ctx, wire::IpcOpenEvent::Reader args) {
  session::Tenant& t = ctx.tenant();
  std::shared_ptr<session::IpcEventGrant> grant = ctx.services().ipc.event(handleBytes(args.getHandle()));
  if (grant == nullptr) {
    spdlog::warn("tenant {} ({}): cudaIpcOpenEventHandle refused: no live grant has this handle", t.id(), t.name());
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  if (grant->owner == t.id()) return ctx.finish(CUDA_ERROR_INVALID_CONTEXT);
  if (CUresult r = t.streams().admitEvent(args.getEvent()); r != CUDA_SUCCESS) return ctx.finish(r);
  session::EventState e;
  e.gpu = grant->gpu;
  e.event = grant->event.get();
  e.shared = grant->event;
  t.streams().insertEvent(args.getEvent(), std::move(e));
  ctx.finish(CUDA_SUCCESS);
}

}  // namespace

void handleIpc(CallContext& ctx, wire::IpcCall::Reader call) {
  switch (call.which()) {
    case wire::IpcCall::GET_MEM_HANDLE:
      return getMemHandle(ctx, call.getGetMemHandle().getPtr(), call.getGetMemHandle().getToken());
    case wire::IpcCall::OPEN_MEM_HANDLE: return openMemHandle(ctx, call.getOpenMemHandle().getHandle());
    case wire::IpcCall::CLOSE_MEM_HANDLE: return closeMemHandle(ctx, call.getCloseMemHandle().getPtr());
    case wire::IpcCall::GET_EVENT_HANDLE:
      return getEventHandle(ctx, call.getGetEventHandle().getEvent(), call.getGetEventHandle().getToken());
    case wire::IpcCall::OPEN_EVENT_HANDLE: return openEventHandle(ctx, call.getOpenEventHandle());
  }
  ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace tally::server::api
