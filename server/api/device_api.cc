// Device-wide calls, narrowed to the tenant: a device sync waits for this tenant's streams
// only; context-wide limits are only ever raised, or refused when they could hurt others.
#include "server/api/call_context.h"

#include <spdlog/spdlog.h>

namespace tally::server::api {

namespace {

void synchronizeDevice(CallContext& ctx, uint32_t device) {
  gpu::Gpu* g = ctx.tenant().gpu(device);
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  replyWhenDone(ctx, *g, ctx.tenant().joinedSyncStream(g));
}

bool limitIsSafeToRaise(CUlimit limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
    case CU_LIMIT_PRINTF_FIFO_SIZE:
    case CU_LIMIT_MALLOC_HEAP_SIZE:
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT:
      return true;
    default:
      return false;  // L2 persistence and fetch granularity change other tenants' behaviour
  }
}

void setLimit(CallContext& ctx, wire::Limit::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  auto limit = static_cast<CUlimit>(args.getLimit());
  if (!limitIsSafeToRaise(limit)) {
    spdlog::warn("tenant {} ({}): refused context limit {} = {}: it would change other tenants' behaviour",
                 ctx.tenant().id(), ctx.tenant().name(), args.getLimit(), args.getValue());
    return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
  CUresult r = g->raiseLimit(limit, args.getValue());
  if (r == CUDA_SUCCESS) ctx.tenant().requestedLimits()[args.getLimit()] = args.getValue();
  ctx.finish(r);
}

void getLimit(CallContext& ctx, wire::Limit::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  size_t value = 0;
  CUresult r = g->getLimit(static_cast<CUlimit>(args.getLimit()), value);
  // A tenant sees the value it set (or tallyd's starting value), although the shared context
  // may hold a larger one that another tenant asked for.
  auto& requested = ctx.tenant().requestedLimits();
  if (auto it = requested.find(args.getLimit()); r == CUDA_SUCCESS && it != requested.end()) {
    value = it->second;
  } else if (size_t initial = g->initialLimit(static_cast<CUlimit>(args.getLimit())); r == CUDA_SUCCESS && initial != 0) {
    value = initial;
  }
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(value); });
}

}  // namespace

void handleDevice(CallContext& ctx, wire::Call::Reader call) {
  switch (call.which()) {
    case wire::Call::DEVICE_SYNCHRONIZE: return synchronizeDevice(ctx, call.getDeviceSynchronize().getDevice());
    case wire::Call::SET_LIMIT: return setLimit(ctx, call.getSetLimit());
    case wire::Call::GET_LIMIT: return getLimit(ctx, call.getGetLimit());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
