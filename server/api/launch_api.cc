// Kernel launches. The parameter buffer is laid out by the kernel's own offsets; we hand the
// driver a pointer per parameter into it. An HP tenant's plain launches are made by its launch
// thread (session/launch_thread.h) while this thread reads the next call.
#include "server/api/call_context.h"

#include "server/api/request_checks.h"
#include "server/gpu/cuda_check.h"
#include "server/gpu/fault_monitor.h"
#include "server/gpu/variant_launch.h"
#include "server/scheduler/launcher.h"
#include "server/scheduler/policy.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace tally::server::api {

namespace {

constexpr size_t kMaxLaunchAttributes = 8;

// The attributes of one launch as the driver takes them (room for the cooperative flag too).
struct LaunchAttributes {
  std::array<CUlaunchAttribute, kMaxLaunchAttributes + 1> values{};
  unsigned count = 0;
  std::span<const CUlaunchAttribute> view() const { return {values.data(), count}; }
  // Without the stream's previous work being one of the tenant's kernels, the attribute would
  // let this kernel overlap whatever tallyd or the tenant queued before it: it runs ordered.
  void dropProgrammaticSerialization() {
    auto end = std::remove_if(values.begin(), values.begin() + count, [](const CUlaunchAttribute& a) {
      return a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    });
    count = static_cast<unsigned>(end - values.begin());
  }
  bool cooperative() const {
    return std::any_of(values.begin(), values.begin() + count, [](const CUlaunchAttribute& a) {
      return a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a.value.cooperative != 0;
    });
  }
};

// The most urgent stream priority this tenant's class gets on `g` (nullopt: the policy sets none).
std::optional<int> priorityBand(CallContext& ctx, const gpu::Gpu& g) {
  scheduler::Policy* policy = ctx.services().policy;
  if (policy == nullptr) return std::nullopt;
  return policy->streamPriority(ctx.tenant().priority() == session::PriorityClass::kHigh, g);
}

// One wire attribute as the driver takes it; a priority is clamped to the device's range and to
// what the tenant's class allows. NOT_SUPPORTED for attributes that reach into the shared context.
CUresult toDriverAttribute(CallContext& ctx, const gpu::Gpu& g, wire::LaunchAttribute::Reader in,
                           CUlaunchAttribute& out) {
  const uint32_t id = in.getId();
  auto v = in.getValue();
  switch (id) {
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: out.value.cooperative = static_cast<int>(v.getX()); break;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY: {
      const auto& d = g.description();
      out.value.priority = clampLaunchPriority(static_cast<int>(v.getX()), d.streamPriorityGreatest,
                                               d.streamPriorityLeast, priorityBand(ctx, g));
      break;
    }
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      out.value.programmaticStreamSerializationAllowed = v.getX() != 0 ? 1 : 0;
      break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      out.value.clusterDim.x = v.getX();
      out.value.clusterDim.y = v.getY();
      out.value.clusterDim.z = v.getZ();
      break;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: {
      auto policy = enumFromWire(v.getX(), static_cast<CUclusterSchedulingPolicy>(CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING + 1));
      if (!policy) return CUDA_ERROR_INVALID_VALUE;
      out.value.clusterSchedulingPolicyPreference = *policy;
      break;
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
  // Cast only now that it is one of the ids above: an unchecked cast would be undefined
  // behaviour (CUlaunchAttributeID has no public _MAX to check against).
  out.id = static_cast<CUlaunchAttributeID>(id);
  return CUDA_SUCCESS;
}

CUresult launchAttributes(CallContext& ctx, const gpu::Gpu& g, wire::LaunchKernel::Reader args,
                          LaunchAttributes& out) {
  auto attributes = args.getAttributes();
  if (attributes.size() > kMaxLaunchAttributes) return CUDA_ERROR_INVALID_VALUE;
  for (auto a : attributes) {
    if (CUresult r = toDriverAttribute(ctx, g, a, out.values[out.count++]); r != CUDA_SUCCESS) return r;
  }
  if (args.getCooperative()) {
    out.values[out.count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    out.values[out.count++].value.cooperative = 1;
  }
  return CUDA_SUCCESS;
}

// Each pointer of the message is followed (and bounds-checked) once: this runs per launch.
gpu::LaunchShape shapeOf(wire::LaunchKernel::Reader args) {
  gpu::LaunchShape shape;
  auto grid = args.getGrid();
  auto block = args.getBlock();
  shape.grid[0] = grid.getX();
  shape.grid[1] = grid.getY();
  shape.grid[2] = grid.getZ();
  shape.block[0] = block.getX();
  shape.block[1] = block.getY();
  shape.block[2] = block.getZ();
  shape.sharedMem = args.getSharedMem();
  return shape;
}

// What the scheduler needs of one launch; the parameter pointers into `buffer` are made by
// scheduler::ParameterPointers.
scheduler::KernelLaunch kernelLaunch(session::Tenant& tenant, session::FunctionState& f, session::StreamState& s,
                                     const gpu::LaunchShape& shape, std::span<const uint8_t> buffer, bool mustNotHold,
                                     bool followsKernel) {
  auto& counters = tenant.counters();
  scheduler::KernelLaunch k;
  k.tenant = tenant.id();
  k.highPriority = tenant.priority() == session::PriorityClass::kHigh;
  k.mustNotHold = mustNotHold;
  k.streamId = s.id;
  k.gpu = f.gpu;
  k.stream = s.stream;
  k.original = f.function;
  k.sliced = f.sliced;
  k.ptb = f.ptb;
  k.chained = f.chained;
  k.followsKernel = followsKernel;
  k.profileKey = &f.profileKey;
  k.shape = shape;
  k.paramBuffer = buffer;
  k.paramLayout = &f.params;
  k.slicedLaunches = &counters.slicedLaunches;
  k.ptbLaunches = &counters.ptbLaunches;
  k.chainedLaunches = &counters.chainedLaunches;
  k.preemptions = &counters.preemptions;
  k.held = &counters.held;
  k.variantStreams = [&tenant, s = &s](CUstream& side, CUdeviceptr& control) {
    if (!tenant.streams().prepareVariants(*s)) return false;
    side = s->variantSide;
    control = s->ptbControl;
    return true;
  };
  return k;
}

// Through the scheduler, or straight to the driver when tallyd runs without one.
CUresult launchScheduled(scheduler::Policy* policy, const scheduler::KernelLaunch& k, void** params) {
  return policy != nullptr ? policy->launch(k) : scheduler::driverLauncher().launchOriginal(k, params);
}

// A launch handed to the tenant's launch thread (session/launch_thread.h): everything it needs,
// copied, since the message it came in is gone by the time it runs. The tables it points into
// change only between drains.
struct QueuedLaunch {
  static constexpr size_t kMaxParamBytes = 1024;
  scheduler::Policy* policy;
  gpu::FaultMonitor* faults;
  session::Tenant* tenant;
  session::FunctionState* function;
  session::StreamState* stream;
  gpu::LaunchShape shape;
  bool mustNotHold;
  bool followsKernel;
  uint32_t paramBytes;
  alignas(16) uint8_t params[kMaxParamBytes];
};

// On the launch thread. Its error reaches the tenant as a one-way call's does: deferred.
void runQueued(QueuedLaunch& q) {
  session::Tenant& tenant = *q.tenant;
  q.function->gpu->makeCurrent();
  scheduler::KernelLaunch k =
      kernelLaunch(tenant, *q.function, *q.stream, q.shape, {q.params, q.paramBytes}, q.mustNotHold, q.followsKernel);
  scheduler::ParameterPointers params(k);
  k.paramPointers = params.get();
  CUresult r = launchScheduled(q.policy, k, params.get());
  if (r == CUDA_SUCCESS) return;
  if (q.faults != nullptr) r = q.faults->statusFor(tenant.id(), r);
  if (tenant.deferError(r)) {
    spdlog::info("tenant {} ({}): one-way launchKernel failed on its launch thread: {}; reported at the tenant's "
                 "next sync",
                 tenant.id(), tenant.name(), gpu::describe(r));
  }
}

// Whether the launch thread may make this launch: a plain one-way launch of an HP tenant's
// kernel, on a stream that is not capturing (a capture's order is the session thread's).
bool queueable(CallContext& ctx, const LaunchAttributes& attributes, size_t paramBytes, bool capturing) {
  return ctx.oneWay() && attributes.count == 0 && !capturing && paramBytes <= QueuedLaunch::kMaxParamBytes;
}

void queue(CallContext& ctx, session::LaunchThread& thread, session::FunctionState& f, session::StreamState& s,
           const gpu::LaunchShape& shape, capnp::Data::Reader buffer, bool followsKernel) {
  QueuedLaunch q;
  q.policy = ctx.services().policy;
  q.faults = ctx.services().faults;
  q.tenant = &ctx.tenant();
  q.function = &f;
  q.stream = &s;
  q.shape = shape;
  q.mustNotHold = ctx.tenant().mustNotBeHeld();
  q.followsKernel = followsKernel;
  q.paramBytes = static_cast<uint32_t>(buffer.size());
  std::memcpy(q.params, buffer.begin(), buffer.size());
  thread.submit<QueuedLaunch, runQueued>(q);
}

void launch(CallContext& ctx, wire::LaunchKernel::Reader args) {
  session::FunctionState* f = ctx.tenant().modules().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  auto buffer = args.getParams();
  if (buffer.size() != f->paramBytes) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr || s->gpu != f->gpu) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  LaunchAttributes attributes;
  if (CUresult r = launchAttributes(ctx, *f->gpu, args, attributes); r != CUDA_SUCCESS) return ctx.finish(r);
  // The application sized a cooperative grid for every SM of the device: an SM partition could
  // not hold it at once (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE where it runs natively).
  if (attributes.cooperative()) ctx.tenant().streams().place(*s, gpu::Placement::wholeGpu());
  const bool capturing = ctx.tenant().streams().capturing(*s);
  const bool followsKernel = !capturing && session::followsKernel(*s);
  if (!followsKernel) attributes.dropProgrammaticSerialization();
  if (session::LaunchThread* thread = ctx.tenant().launchThread()) {
    // Handed over only while more calls wait behind it: that is when reading them overlaps the
    // driver call. The last launch of a burst (a sync likely follows) is made here, without a
    // hand-off between threads; so is one that finds the thread asleep, which then wakes for
    // the rest of the burst.
    const bool burst = queueable(ctx, attributes, buffer.size(), capturing) && ctx.moreCallsWaiting();
    if (burst && !thread->asleep()) {
      session::noteKernel(*s);  // its error, if any, reaches the tenant later: taken as made
      queue(ctx, *thread, *f, *s, shapeOf(args), buffer, followsKernel);
      return ctx.finish(CUDA_SUCCESS);
    }
    if (burst) thread->wake();
    thread->drain();  // made here: after every launch it holds
  }
  scheduler::KernelLaunch k = kernelLaunch(ctx.tenant(), *f, *s, shapeOf(args),
                                           std::span<const uint8_t>(buffer.begin(), buffer.size()),
                                           ctx.tenant().mustNotBeHeld(), followsKernel);
  // The driver copies parameter values at launch; pointers into the message are enough.
  scheduler::ParameterPointers params(k);
  k.paramPointers = params.get();
  // Launches with attributes go through the scheduler like any other (gate, priorities,
  // accounting), as the original kernel: a variant would not keep cooperative or cluster semantics.
  k.attributes = attributes.view();
  if (!k.attributes.empty()) k.sliced = k.ptb = k.chained = nullptr;
  // Captured, not run: the graph gets the original kernel. The scheduler's gate, variants and
  // marks (events, stream writes) would be captured too and replayed out of place; graph
  // launches go through the policy instead (graph_api.cc).
  CUresult r = launchScheduled(capturing ? nullptr : ctx.services().policy, k, params.get());
  if (r == CUDA_SUCCESS && !capturing) session::noteKernel(*s);
  ctx.finish(r);
}

}  // namespace

void handleLaunch(CallContext& ctx, wire::Call::Reader call) { launch(ctx, call.getLaunchKernel()); }

}  // namespace tally::server::api
