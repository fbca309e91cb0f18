// Kernel launches. The parameter buffer is laid out by the kernel's own offsets; we hand the
// driver a pointer per parameter into it.
#include "server/api/call_context.h"

#include <array>
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
  if (args.getAttributes().size() == 0 && !args.getCooperative()) {
    r = cuLaunchKernel(f->function, args.getGrid().getX(), args.getGrid().getY(), args.getGrid().getZ(),
                       args.getBlock().getX(), args.getBlock().getY(), args.getBlock().getZ(), args.getSharedMem(),
                       s->stream, params, nullptr);
  } else {
    r = launchEx(*f, args, s->stream, params);
  }
  ctx.finish(r);
}

}  // namespace

void handleLaunch(CallContext& ctx, wire::Call::Reader call) { launch(ctx, call.getLaunchKernel()); }

}  // namespace tally::server::api
