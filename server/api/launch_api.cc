// Kernel launches. The parameter buffer is laid out by the kernel's own offsets; we hand the
// driver a pointer per parameter into it.
#include "server/api/call_context.h"

#include "server/gpu/variant_launch.h"

#include <algorithm>
#include <array>
#include <random>
#include <vector>

namespace tally::server::api {

namespace {

constexpr size_t kMaxLaunchAttributes = 8;

CUresult launchEx(const session::FunctionState& f, wire::LaunchKernel::Reader args, CUstream stream, void** params) {
  auto attributes = args.getAttributes();
  if (attributes.size() > kMaxLaunchAttributes) return CUDA_ERROR_INVALID_VALUE;
  std::array<CUlaunchAttribute, kMaxLaunchAttributes + 1> attrs{};
  unsigned count = 0;
  for (auto a : attributes) {
    CUlaunchAttribute& out = attrs[count++];
    out.id = static_cast<CUlaunchAttributeID>(a.getId());
    auto v = a.getValue();
    switch (out.id) {
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: out.value.cooperative = static_cast<int>(v.getX()); break;
      case CU_LAUNCH_ATTRIBUTE_PRIORITY: out.value.priority = static_cast<int>(v.getX()); break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
        out.value.clusterDim.x = v.getX();
        out.value.clusterDim.y = v.getY();
        out.value.clusterDim.z = v.getZ();
        break;
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
        out.value.clusterSchedulingPolicyPreference = static_cast<CUclusterSchedulingPolicy>(v.getX());
        break;
      default: return CUDA_ERROR_NOT_SUPPORTED;  // attributes that reach into the shared context
    }
  }
  if (args.getCooperative()) {
    attrs[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[count++].value.cooperative = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = args.getGrid().getX();
  config.gridDimY = args.getGrid().getY();
  config.gridDimZ = args.getGrid().getZ();
  config.blockDimX = args.getBlock().getX();
  config.blockDimY = args.getBlock().getY();
  config.blockDimZ = args.getBlock().getZ();
  config.sharedMemBytes = args.getSharedMem();
  config.hStream = stream;
  config.attrs = attrs.data();
  config.numAttrs = count;
  return cuLaunchKernelEx(&config, f.function, params, nullptr);
}

gpu::LaunchShape shapeOf(wire::LaunchKernel::Reader args) {
  gpu::LaunchShape shape;
  shape.grid[0] = args.getGrid().getX();
  shape.grid[1] = args.getGrid().getY();
  shape.grid[2] = args.getGrid().getZ();
  shape.block[0] = args.getBlock().getX();
  shape.block[1] = args.getBlock().getY();
  shape.block[2] = args.getBlock().getZ();
  shape.sharedMem = args.getSharedMem();
  return shape;
}

// Blocks of `variant` one full wave holds at this shape; 0 when the variant cannot run it at all
// although the original can (more registers, or the PTB variant's own 16 bytes of shared memory
// on top of a launch that uses the limit).
uint64_t residentBlocks(CUfunction variant, const session::FunctionState& f, const gpu::LaunchShape& shape) {
  int perSm = 0;
  int threads = static_cast<int>(shape.block[0] * shape.block[1] * shape.block[2]);
  if (variant == nullptr ||
      cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, variant, threads, shape.sharedMem) != CUDA_SUCCESS) {
    return 0;
  }
  return uint64_t(std::max(perSm, 0)) * f.gpu->multiprocessors();
}

// Stress mode: the original, the sliced variant over 2-16 slices, or the PTB variant with a
// random worker count and chunk, half of the PTB launches preempted 1-3 times at random points.
CUresult stressLaunch(CallContext& ctx, session::FunctionState& f, session::StreamState& s,
                      const gpu::LaunchShape& shape, gpu::KernelParams params) {
  thread_local std::mt19937_64 rng(ctx.services().stressSeed ^ (ctx.tenant().id() * 0x9e3779b97f4a7c15ull));
  const uint64_t total = shape.blocks();
  auto pick = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  uint64_t choice = pick(0, 3);
  auto& counters = ctx.tenant().counters();
  if (choice == 1 && total > 1 && residentBlocks(f.sliced, f, shape) > 0) {
    counters.slicedLaunches.fetch_add(1, std::memory_order_relaxed);
    return gpu::launchSliced(f.sliced, shape, s.stream, params, pick(2, std::min<uint64_t>(16, total)));
  }
  const gpu::PtbHelpers* trigger = f.gpu->ptbHelpers();
  uint64_t resident = choice >= 2 ? residentBlocks(f.ptb, f, shape) : 0;
  if (resident > 0 && trigger != nullptr && ctx.tenant().prepareVariants(s)) {
    counters.ptbLaunches.fetch_add(1, std::memory_order_relaxed);
    gpu::PtbWorkers workers{pick(1, resident), static_cast<uint32_t>(pick(1, 4))};
    gpu::PtbControl control{s.ptbControl, s.ptbControl + 8};
    if (choice == 2 || total < 2) {
      if (CUresult r = gpu::resetPtb(control, s.stream); r != CUDA_SUCCESS) return r;
      return gpu::launchPtb(f.ptb, shape, s.stream, params, workers, control);
    }
    std::vector<uint64_t> thresholds(pick(1, 3));
    for (uint64_t& t : thresholds) t = pick(1, total - 1);
    std::sort(thresholds.begin(), thresholds.end());
    counters.preemptions.fetch_add(thresholds.size(), std::memory_order_relaxed);
    return gpu::launchPtbPreempted(f.ptb, shape, s.stream, s.variantSide, params, workers, control, thresholds,
                                   *trigger);
  }
  return cuLaunchKernel(f.function, shape.grid[0], shape.grid[1], shape.grid[2], shape.block[0], shape.block[1],
                        shape.block[2], shape.sharedMem, s.stream, params.values, nullptr);
}

scheduler::KernelLaunch kernelLaunch(CallContext& ctx, session::FunctionState& f, session::StreamState& s,
                                     wire::LaunchKernel::Reader args, void** params) {
  auto& counters = ctx.tenant().counters();
  scheduler::KernelLaunch k;
  k.tenant = ctx.tenant().id();
  k.highPriority = ctx.tenant().priority() == session::PriorityClass::kHigh;
  k.mustNotHold = ctx.tenant().awaitsHostFuncs();
  k.streamId = s.id;
  k.gpu = f.gpu;
  k.stream = s.stream;
  k.original = f.function;
  k.sliced = f.sliced;
  k.ptb = f.ptb;
  k.profileKey = &f.profileKey;
  k.shape = shapeOf(args);
  k.paramBuffer = std::span<const uint8_t>(args.getParams().begin(), args.getParams().size());
  k.paramLayout = &f.params;
  k.paramPointers = params;
  k.slicedLaunches = &counters.slicedLaunches;
  k.ptbLaunches = &counters.ptbLaunches;
  k.preemptions = &counters.preemptions;
  k.held = &counters.held;
  return k;
}

void launch(CallContext& ctx, wire::LaunchKernel::Reader args) {
  session::FunctionState* f = ctx.tenant().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  auto buffer = args.getParams();
  if (buffer.size() != f->paramBytes) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr || s->gpu != f->gpu) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  // The driver copies parameter values at launch; pointers into the message are enough.
  std::array<void*, 64> inlineParams;
  std::vector<void*> manyParams;
  void** params = inlineParams.data();
  if (f->params.size() > inlineParams.size()) {
    manyParams.resize(f->params.size());
    params = manyParams.data();
  }
  for (size_t i = 0; i < f->params.size(); ++i) params[i] = const_cast<uint8_t*>(buffer.begin()) + f->params[i].first;
  CUresult r;
  const bool plain = args.getAttributes().size() == 0 && !args.getCooperative();
  scheduler::Policy* policy = ctx.services().policy;
  if (plain && ctx.services().stress && (f->sliced != nullptr || f->ptb != nullptr)) {
    r = stressLaunch(ctx, *f, *s, shapeOf(args), gpu::KernelParams{params, f->params.size()});
  } else if (plain && policy != nullptr) {
    r = policy->launch(kernelLaunch(ctx, *f, *s, args, params));
  } else if (plain) {
    r = cuLaunchKernel(f->function, args.getGrid().getX(), args.getGrid().getY(), args.getGrid().getZ(),
                       args.getBlock().getX(), args.getBlock().getY(), args.getBlock().getZ(), args.getSharedMem(),
                       s->stream, params, nullptr);
  } else {
    r = launchEx(*f, args, s->stream, params);
    // Cooperative and attributed launches run as they are; the scheduler still counts them.
    if (r == CUDA_SUCCESS && policy != nullptr) {
      policy->afterWork(ctx.tenant().id(), ctx.tenant().priority() == session::PriorityClass::kHigh, s->id, *s->gpu,
                        s->stream);
    }
  }
  ctx.finish(r);
}

}  // namespace

void handleLaunch(CallContext& ctx, wire::Call::Reader call) { launch(ctx, call.getLaunchKernel()); }

}  // namespace tally::server::api
