// Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap, ...), what PyTorch's
// expandable segments use. Narrowed to the tenant (virtual_memory_table.h): an allocation
// handle's physical memory is the tenant's and counts against its quota; reserved address
// ranges are the tenant's; a mapping must put the tenant's own handle inside the tenant's own
// reservation, and the mapped range then is device memory the tenant owns (MemoryTable), until
// it is unmapped. Access is set for tallyd's device only. Memory leaving the tenant is cleared.
#include "server/api/call_context.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/virtual_memory.h"

#include <spdlog/spdlog.h>

namespace tally::server::api {

namespace {

CUmemAllocationProp deviceProperties(const gpu::Gpu& g) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  // Requested handle types are dropped: nothing leaves tallyd as a file descriptor.
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, g.ordinal()};
  return prop;
}

void refuse(CallContext& ctx, const char* call, CUdeviceptr ptr, size_t size, CUresult r, const char* why) {
  session::Tenant& t = ctx.tenant();
  spdlog::warn("tenant {} ({}): {}(0x{:x}, {}) refused: {}", t.id(), t.name(), call, ptr, size, why);
  ctx.finish(r);
}

void granularity(CallContext& ctx, wire::VmGranularity::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  CUmemAllocationProp prop = deviceProperties(*g);
  size_t value = 0;
  g->makeCurrent();
  CUresult r = cuMemGetAllocationGranularity(
      &value, &prop, args.getRecommended() ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED : CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(value); });
}

void create(CallContext& ctx, wire::VmCreate::Reader args) {
  session::Tenant& t = ctx.tenant();
  if (CUresult r = t.virtualMemory().admitHandle(args.getHandle()); r != CUDA_SUCCESS) return ctx.finish(r);
  gpu::Gpu* g = t.gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  size_t size = args.getSize();
  if (size == 0) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (size > g->description().totalMem || !quotaAllows(ctx, size)) return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
  CUmemAllocationProp prop = deviceProperties(*g);
  prop.allocFlags.gpuDirectRDMACapable = args.getGpuDirectRdmaCapable() ? 1 : 0;
  g->makeCurrent();
  CUmemGenericAllocationHandle handle = 0;
  CUresult r = cuMemCreate(&handle, size, &prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && g->memoryPool() != nullptr) {
    g->memoryPool()->trim();  // memory the shared pool keeps is free to this tenant too
    r = cuMemCreate(&handle, size, &prop, 0);
  }
  if (r == CUDA_SUCCESS) {
    t.virtualMemory().addHandle(args.getHandle(), {handle, size, g});
    t.memory().charge(size);
  }
  ctx.finish(r);
}

// The handle's memory goes back to the driver, cleared when it may hold the tenant's data.
CUresult releaseMemory(CallContext& ctx, const session::VirtualMemoryTable::Handle& h) {
  session::Tenant& t = ctx.tenant();
  h.gpu->makeCurrent();
  CUresult r = gpu::clearThenRelease(h.handle, h.size, static_cast<CUdevice>(h.gpu->ordinal()), h.dirty,
                                     t.streams().joinedSyncStream(h.gpu));
  if (r != CUDA_SUCCESS) {
    spdlog::warn("tenant {} ({}): releasing {} bytes of an allocation handle failed ({}); kept", t.id(), t.name(),
                 h.size, gpu::describe(r));
  }
  t.memory().uncharge(h.size);
  return r;
}

void release(CallContext& ctx, uint64_t id) {
  bool known = false;
  std::optional<session::VirtualMemoryTable::Handle> gone = ctx.tenant().virtualMemory().release(id, known);
  if (!known) return refuse(ctx, "cuMemRelease", 0, id, CUDA_ERROR_INVALID_VALUE, "not an allocation handle of this tenant");
  ctx.finish(gone ? releaseMemory(ctx, *gone) : CUDA_SUCCESS);
}

// Address space only; the driver never hands out overlapping ranges, so the hint is harmless.
void addressReserve(CallContext& ctx, wire::VmReserve::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(0);
  if (g == nullptr) return ctx.finish(CUDA_ERROR_NO_DEVICE);
  if (args.getSize() == 0) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  g->makeCurrent();
  CUdeviceptr base = 0;
  CUresult r = cuMemAddressReserve(&base, args.getSize(), args.getAlignment(), args.getHint(), 0);
  if (r == CUDA_SUCCESS) ctx.tenant().virtualMemory().addReservation(base, args.getSize());
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(base); });
}

void addressFree(CallContext& ctx, wire::VmRange::Reader args) {
  session::VirtualMemoryTable& vm = ctx.tenant().virtualMemory();
  if (CUresult r = vm.admitAddressFree(args.getPtr(), args.getSize()); r != CUDA_SUCCESS) {
    return refuse(ctx, "cuMemAddressFree", args.getPtr(), args.getSize(), r,
                  "not exactly a reservation of this tenant, or still mapped");
  }
  CUresult r = cuMemAddressFree(args.getPtr(), args.getSize());
  if (r == CUDA_SUCCESS) vm.removeReservation(args.getPtr());
  ctx.finish(r);
}

void map(CallContext& ctx, wire::VmMap::Reader args) {
  session::Tenant& t = ctx.tenant();
  session::VirtualMemoryTable& vm = t.virtualMemory();
  CUdeviceptr ptr = args.getPtr();
  if (CUresult r = vm.admitMap(ptr, args.getSize(), args.getOffset(), args.getHandle()); r != CUDA_SUCCESS) {
    return refuse(ctx, "cuMemMap", ptr, args.getSize(), r,
                  "needs this tenant's handle, inside its reservation, over no mapping");
  }
  session::VirtualMemoryTable::Handle* h = vm.handle(args.getHandle());
  h->gpu->makeCurrent();
  CUresult r = cuMemMap(ptr, args.getSize(), args.getOffset(), h->handle, 0);
  if (r == CUDA_SUCCESS) {
    vm.addMapping(ptr, args.getSize(), args.getHandle());
    t.memory().addMapping(ptr, args.getSize(), h->gpu);
  }
  ctx.finish(r);
}

// One or more whole mappings. The tenant's queued work is waited for first: unmapping memory a
// kernel still uses would fault the context every tenant shares. A handle whose last mapping
// this is and that was released already goes now, cleared first.
void unmap(CallContext& ctx, wire::VmRange::Reader args) {
  session::Tenant& t = ctx.tenant();
  auto tiles = t.virtualMemory().mappingsTiling(args.getPtr(), args.getSize());
  if (!tiles) {
    return refuse(ctx, "cuMemUnmap", args.getPtr(), args.getSize(), CUDA_ERROR_INVALID_VALUE,
                  "not whole mappings of this tenant");
  }
  for (auto& [ptr, mapping] : *tiles) {
    session::VirtualMemoryTable::Handle* h = t.virtualMemory().handle(mapping.handle);
    bool last = h != nullptr && h->references == 0 && h->mappings == 1;
    mapping.gpu->makeCurrent();
    t.memory().takeMapping(ptr, mapping.size);
    CUresult r = gpu::unmapAfter(ptr, mapping.size, t.streams().joinedSyncStream(mapping.gpu), last);
    if (r != CUDA_SUCCESS) return ctx.finish(r);
    std::optional<session::VirtualMemoryTable::Handle> gone = t.virtualMemory().removeMapping(ptr);
    if (gone) {
      gone->dirty = false;  // cleared just now, with its last mapping
      releaseMemory(ctx, *gone);
    }
  }
  ctx.finish(CUDA_SUCCESS);
}

// Every byte of the range must be mapped by this tenant; the location is tallyd's device.
void setAccess(CallContext& ctx, wire::VmSetAccess::Reader args) {
  session::Tenant& t = ctx.tenant();
  CUdeviceptr ptr = args.getPtr();
  gpu::Gpu* g = t.memory().ownedBy(ptr, args.getSize());
  auto mapping = t.virtualMemory().mappingContaining(ptr);
  if (g == nullptr || !mapping || args.getSize() == 0) {
    return refuse(ctx, "cuMemSetAccess", ptr, args.getSize(), CUDA_ERROR_INVALID_VALUE, "not mapped by this tenant");
  }
  std::vector<CUmemAccessDesc> access;
  for (auto a : args.getAccess()) {
    gpu::Gpu* on = t.gpu(a.getDevice());
    if (on == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
    CUmemAccessDesc d{};
    d.location = {CU_MEM_LOCATION_TYPE_DEVICE, on->ordinal()};
    d.flags = static_cast<CUmemAccess_flags>(a.getFlags());
    access.push_back(d);
  }
  if (access.empty()) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  g->makeCurrent();
  ctx.finish(cuMemSetAccess(ptr, args.getSize(), access.data(), access.size()));
}

void getAccess(CallContext& ctx, wire::VmGetAccess::Reader args) {
  session::Tenant& t = ctx.tenant();
  gpu::Gpu* on = t.gpu(args.getDevice());
  if (on == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  if (!t.virtualMemory().mappingContaining(args.getPtr())) {
    return refuse(ctx, "cuMemGetAccess", args.getPtr(), 0, CUDA_ERROR_INVALID_VALUE, "not mapped by this tenant");
  }
  CUmemLocation location{CU_MEM_LOCATION_TYPE_DEVICE, on->ordinal()};
  unsigned long long flags = 0;
  on->makeCurrent();
  CUresult r = cuMemGetAccess(&flags, &location, args.getPtr());
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(flags); });
}

void retainHandle(CallContext& ctx, uint64_t ptr) {
  std::optional<uint64_t> id = ctx.tenant().virtualMemory().retain(ptr);
  if (!id) return refuse(ctx, "cuMemRetainAllocationHandle", ptr, 0, CUDA_ERROR_INVALID_VALUE, "not mapped by this tenant");
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) { reply.setValue(*id); });
}

}  // namespace

void handleVirtualMemory(CallContext& ctx, wire::VirtualMemoryCall::Reader call) {
  using V = wire::VirtualMemoryCall;
  switch (call.which()) {
    case V::GRANULARITY: return granularity(ctx, call.getGranularity());
    case V::CREATE: return create(ctx, call.getCreate());
    case V::RELEASE: return release(ctx, call.getRelease().getHandle());
    case V::ADDRESS_RESERVE: return addressReserve(ctx, call.getAddressReserve());
    case V::ADDRESS_FREE: return addressFree(ctx, call.getAddressFree());
    case V::MAP: return map(ctx, call.getMap());
    case V::UNMAP: return unmap(ctx, call.getUnmap());
    case V::SET_ACCESS: return setAccess(ctx, call.getSetAccess());
    case V::GET_ACCESS: return getAccess(ctx, call.getGetAccess());
    case V::RETAIN_HANDLE: return retainHandle(ctx, call.getRetainHandle().getPtr());
  }
  ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace tally::server::api
