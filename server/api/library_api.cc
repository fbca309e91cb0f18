// cuBLAS / cuBLASLt / cuDNN calls: finds the function's executor (server/library), runs it on the
// tenant's GPU with the tenant's objects, streams and memory, and answers with the library's
// status and outputs. A one-way call that fails leaves CUDA_ERROR_INVALID_VALUE (refused
// arguments) or CUDA_ERROR_LAUNCH_FAILED (the library failed) for the tenant's next
// synchronizing call, and the library's own status in tallyd's log.
#include "server/api/call_context.h"
#include "server/library/library_call.h"

#include <spdlog/spdlog.h>

namespace tally::server::api {

namespace {

CUresult deferredErrorFor(library::Library lib, int status) {
  return status == library::invalidValueStatus(lib) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_LAUNCH_FAILED;
}

// A GEMM or convolution goes through the scheduler as one unit, like a graph launch: a
// best-effort tenant's waits its turn, a high-priority tenant's closes the gate. Set-up and
// queries go straight to the library; work recorded into a capture is not tracked in flight.
int run(CallContext& ctx, const library::Executor& executor, library::LibraryCall& c, gpu::Gpu& g) {
  scheduler::Policy* policy = ctx.services().policy;
  if (!executor.work || !ctx.oneWay() || policy == nullptr) return executor.run(c);
  int status = 0;
  scheduler::OpaqueWork w = opaqueWork(ctx, g);
  w.enqueue = [&](CUstream& used) {
    status = executor.run(c);
    session::StreamState* s = c.workStream();
    used = s != nullptr && !ctx.tenant().streams().capturing(*s) ? s->stream : nullptr;
    return CUDA_SUCCESS;
  };
  policy->runOpaque(w);
  return status;
}

}  // namespace

void handleLibrary(CallContext& ctx, wire::Call::Reader call) {
  auto in = call.getLibrary();
  const library::Executor* executor = library::findExecutor(in.getFunction());
  if (executor == nullptr) {
    spdlog::warn("tenant {}: library function {:#x} is unknown to this tallyd", ctx.tenant().name(), in.getFunction());
    ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
    return;
  }
  library::Library lib = library::libraryOf(executor->name);
  gpu::Gpu* g = ctx.tenant().gpu(in.getDevice());
  if (g == nullptr) {
    ctx.finish(static_cast<CUresult>(library::invalidValueStatus(lib)));
    return;
  }
  g->makeCurrent();
  auto args = in.getArgs();
  library::LibraryCall c(ctx.tenant(), *g, lib, executor->name, library::ArgReader(args.begin(), args.size()),
                         [&ctx](uint64_t id) { return streamForWork(ctx, id); });
  int status = run(ctx, *executor, c, *g);
  if (c.malformed()) {
    ctx.protocolError(std::string(executor->name) + ": arguments do not match the function's layout");
    return;
  }
  ctx.setWorkStream(c.workStream());
  if (ctx.oneWay()) {
    if (status != 0) {
      spdlog::warn("tenant {}: {} failed with status {} (reported at its next synchronizing call)", ctx.tenant().name(),
                   executor->name, status);
      ctx.finish(deferredErrorFor(lib, status));
    }
    return;
  }
  std::string out = c.outputBytes();
  ctx.finish(static_cast<CUresult>(status), [&out](wire::Reply::Builder reply) {
    reply.setLibraryOut(kj::arrayPtr(reinterpret_cast<const kj::byte*>(out.data()), out.size()));
  });
}

}  // namespace tally::server::api
