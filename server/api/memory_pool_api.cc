// Stream-ordered allocator (cudaMallocAsync, memory pools), narrowed to the tenant: every pool
// is the tenant's own (mem_pool_table.h), allocations are recorded in its MemoryTable and
// counted against its quota as cudaMalloc's are, and a free names only the tenant's own
// allocations. Freed memory is cleared on the freeing stream before it returns to the pool
// (memory_pool.h): a pool trims to the driver, which may hand the pages to another tenant.
#include "server/api/call_context.h"
#include "server/gpu/cuda_check.h"

#include <spdlog/spdlog.h>

namespace tally::server::api {

namespace {

// A tenant's pool starts as a native default pool does (release threshold 0, reuse allowed);
// the tenant's own attribute calls change only it.
CUresult createPool(gpu::Gpu& g, size_t maxSize, CUmemoryPool& out) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;  // nothing leaves tallyd as a file descriptor
  props.location = {CU_MEM_LOCATION_TYPE_DEVICE, static_cast<int>(g.ordinal())};
  props.maxSize = maxSize;
  g.makeCurrent();
  return cuMemPoolCreate(&out, &props);
}

// The tenant's pool `id`; a default pool is created on first use.
session::MemPoolTable::Pool* poolFor(CallContext& ctx, uint64_t id) {
  session::Tenant& t = ctx.tenant();
  if (session::MemPoolTable::Pool* p = t.memPools().find(id)) return p;
  if (!session::MemPoolTable::isDefault(id)) return nullptr;
  gpu::Gpu* g = t.gpu(static_cast<uint32_t>(id - 1));
  if (g == nullptr) return nullptr;
  CUmemoryPool pool = nullptr;
  if (CUresult r = createPool(*g, 0, pool); r != CUDA_SUCCESS) {
    spdlog::warn("tenant {} ({}): default memory pool of device {}: {}", t.id(), t.name(), id - 1, gpu::describe(r));
    return nullptr;
  }
  t.memPools().add(id, {pool, g});
  return t.memPools().find(id);
}

void create(CallContext& ctx, wire::MemPoolCreate::Reader args) {
  session::Tenant& t = ctx.tenant();
  if (CUresult r = t.memPools().admit(args.getPool()); r != CUDA_SUCCESS) return ctx.finish(r);
  gpu::Gpu* g = t.gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  CUmemoryPool pool = nullptr;
  CUresult r = createPool(*g, args.getMaxSize(), pool);
  if (r == CUDA_SUCCESS) t.memPools().add(args.getPool(), {pool, g});
  ctx.finish(r);
}

// Allocations still out keep the pool's memory until they are freed (the driver defers the
// destruction), and they stay the tenant's to free.
void destroy(CallContext& ctx, uint64_t id) {
  std::optional<session::MemPoolTable::Pool> p = ctx.tenant().memPools().take(id);
  if (!p) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  p->gpu->makeCurrent();
  ctx.finish(cuMemPoolDestroy(p->pool));
}

// On the tenant's stream, recorded when the call returns: the address is valid in stream
// order, and the tenant owns it from now on (copies and kernels queued after it may use it).
void allocAsync(CallContext& ctx, wire::MemAllocAsync::Reader args) {
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  session::MemPoolTable::Pool* p = poolFor(ctx, args.getPool());
  if (p == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  size_t size = args.getSize();
  if (size == 0) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (size > p->gpu->description().totalMem || !quotaAllows(ctx, size)) return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
  p->gpu->makeCurrent();
  CUdeviceptr ptr = 0;
  CUresult r = cuMemAllocFromPoolAsync(&ptr, size, p->pool, s->stream);
  if (r == CUDA_ERROR_OUT_OF_MEMORY && p->gpu->memoryPool() != nullptr) {
    // What the GPU's shared pool keeps for cudaMalloc reuse is free memory to this tenant too.
    p->gpu->memoryPool()->trim();
    r = cuMemAllocFromPoolAsync(&ptr, size, p->pool, s->stream);
  }
  if (r == CUDA_SUCCESS) ctx.tenant().memory().addAllocation(ptr, size, p->gpu);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(ptr); });
}

// Any allocation of the tenant (cudaMalloc's too, as natively), cleared then freed in the
// order of `stream`.
void freeAsync(CallContext& ctx, wire::MemFreeAsync::Reader args) {
  session::Tenant& t = ctx.tenant();
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  std::optional<session::MemoryTable::Range> range = t.memory().takeAllocation(args.getPtr());
  if (!range) {
    spdlog::warn("tenant {} ({}): cudaFreeAsync(0x{:x}) refused: not an allocation of this tenant", t.id(), t.name(),
                 args.getPtr());
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  range->gpu->makeCurrent();
  ctx.finish(gpu::clearThenFree(args.getPtr(), range->size, s->stream));
}

// Reuse flags are ints, the memory figures 64-bit; both travel as UInt64.
bool isIntAttribute(CUmemPool_attribute a) {
  return a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
         a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

bool isKnownAttribute(uint32_t a) {
  return a >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES && a <= CU_MEMPOOL_ATTR_USED_MEM_HIGH;
}

void setAttribute(CallContext& ctx, wire::MemPoolAttribute::Reader args) {
  session::MemPoolTable::Pool* p = poolFor(ctx, args.getPool());
  if (p == nullptr || !isKnownAttribute(args.getAttribute())) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  auto attribute = static_cast<CUmemPool_attribute>(args.getAttribute());
  p->gpu->makeCurrent();
  int flag = static_cast<int>(args.getValue());
  cuuint64_t value = args.getValue();
  ctx.finish(cuMemPoolSetAttribute(p->pool, attribute, isIntAttribute(attribute) ? static_cast<void*>(&flag) : &value));
}

void getAttribute(CallContext& ctx, wire::MemPoolAttribute::Reader args) {
  session::MemPoolTable::Pool* p = poolFor(ctx, args.getPool());
  if (p == nullptr || !isKnownAttribute(args.getAttribute())) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  auto attribute = static_cast<CUmemPool_attribute>(args.getAttribute());
  p->gpu->makeCurrent();
  int flag = 0;
  cuuint64_t value = 0;
  CUresult r = cuMemPoolGetAttribute(p->pool, attribute, isIntAttribute(attribute) ? static_cast<void*>(&flag) : &value);
  if (isIntAttribute(attribute)) value = static_cast<cuuint64_t>(flag);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(value); });
}

void trimTo(CallContext& ctx, wire::MemPoolTrim::Reader args) {
  session::MemPoolTable::Pool* p = poolFor(ctx, args.getPool());
  if (p == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  p->gpu->makeCurrent();
  // The driver gives back only memory whose asynchronous free it has seen complete in a
  // synchronize of the freeing stream ("completion observed on the host"); a query does not
  // count (the H200 kept a freed 64 MiB reserved after one). The tenant's own syncs are answered
  // from tallyd's completion events, which the driver does not count either, so the tenant's
  // idle streams on this GPU are synchronized first (StreamTable::observeIdleStreams).
  ctx.tenant().streams().observeIdleStreams(p->gpu);
  ctx.finish(cuMemPoolTrimTo(p->pool, args.getMinBytesToKeep()));
}

}  // namespace

void handleMemPool(CallContext& ctx, wire::MemPoolCall::Reader call) {
  switch (call.which()) {
    case wire::MemPoolCall::CREATE: return create(ctx, call.getCreate());
    case wire::MemPoolCall::DESTROY: return destroy(ctx, call.getDestroy().getPool());
    case wire::MemPoolCall::ALLOC_ASYNC: return allocAsync(ctx, call.getAllocAsync());
    case wire::MemPoolCall::FREE_ASYNC: return freeAsync(ctx, call.getFreeAsync());
    case wire::MemPoolCall::SET_ATTRIBUTE: return setAttribute(ctx, call.getSetAttribute());
    case wire::MemPoolCall::GET_ATTRIBUTE: return getAttribute(ctx, call.getGetAttribute());
    case wire::MemPoolCall::TRIM_TO: return trimTo(ctx, call.getTrimTo());
  }
  ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace tally::server::api
