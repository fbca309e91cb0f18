// Device-wide calls, narrowed to the tenant: a device sync waits for this tenant's streams
// only; context-wide limits are only ever raised, up to the tenant's maxima (TenantLimits), and
// the memory they reserve counts against its quota.
#include "server/api/call_context.h"
#include "server/api/request_checks.h"

#include <spdlog/spdlog.h>

#include <map>

namespace tally::server::api {

namespace {

void synchronizeDevice(CallContext& ctx, uint32_t device) {
  gpu::Gpu* g = ctx.tenant().gpu(device);
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  replyWhenDone(ctx, *g, ctx.tenant().streams().joinedSyncStream(g));
}

// Whether the tenant's memory quota holds its allocations plus what its context limits reserve
// once `limit` is `value` (the device heap and printf buffer are device memory every tenant pays
// for, so they count against the quota of the tenant that asks for them).
bool quotaHoldsLimit(session::Tenant& t, CUlimit limit, size_t value) {
  std::map<int, size_t> after = t.requestedLimits();
  after[limit] = value;
  return session::withinQuota(t.memory().allocatedBytes(), contextLimitCharge(after), t.limits().memoryQuotaBytes);
}

// Refuses what could hurt other tenants with the error the driver would give: limits that change
// their behaviour (NOT_SUPPORTED), values past the tenant's maximum (INVALID_VALUE, as for a
// value past the hardware's), memory past its quota (OUT_OF_MEMORY). CUDA_SUCCESS: allowed.
CUresult checkLimitRequest(CallContext& ctx, CUlimit limit, size_t value) {
  session::Tenant& t = ctx.tenant();
  std::optional<uint64_t> maximum = contextLimitMaximum(t.limits(), limit);
  if (!maximum) {
    spdlog::warn("tenant {} ({}): refused context limit {} = {}: it would change other tenants' behaviour", t.id(),
                 t.name(), static_cast<int>(limit), value);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (value > *maximum) {
    spdlog::warn("tenant {} ({}): refused context limit {} = {}: its maximum is {}", t.id(), t.name(),
                 static_cast<int>(limit), value, *maximum);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!quotaHoldsLimit(t, limit, value)) {
    spdlog::warn("tenant {} ({}): refused context limit {} = {}: with {} bytes allocated it passes the memory quota {}",
                 t.id(), t.name(), static_cast<int>(limit), value, t.memory().allocatedBytes(), t.limits().memoryQuotaBytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

void setLimit(CallContext& ctx, wire::Limit::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  std::optional<CUlimit> limit = enumFromWire(args.getLimit(), CU_LIMIT_MAX);
  if (!limit) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (CUresult r = checkLimitRequest(ctx, *limit, args.getValue()); r != CUDA_SUCCESS) return ctx.finish(r);
  CUresult r = g->raiseLimit(*limit, args.getValue());
  if (r == CUDA_SUCCESS) ctx.tenant().requestedLimits()[args.getLimit()] = args.getValue();
  ctx.finish(r);
}

void getLimit(CallContext& ctx, wire::Limit::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  std::optional<CUlimit> limit = enumFromWire(args.getLimit(), CU_LIMIT_MAX);
  if (!limit) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  size_t value = 0;
  CUresult r = g->getLimit(*limit, value);
  // A tenant sees the value it set (or tallyd's starting value), although the shared context
  // may hold a larger one that another tenant asked for.
  auto& requested = ctx.tenant().requestedLimits();
  if (auto it = requested.find(args.getLimit()); r == CUDA_SUCCESS && it != requested.end()) {
    value = it->second;
  } else if (size_t initial = g->initialLimit(*limit); r == CUDA_SUCCESS && initial != 0) {
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
