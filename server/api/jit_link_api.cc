// Driver JIT linking (cuLinkCreate, cuLinkAddData, cuLinkComplete, cuLinkDestroy): the driver's
// linker runs here, in the GPU's shared context, on the tenant's session thread (so a long link
// holds up that tenant only). Links are the tenant's own by construction: its LinkTable. The
// log buffers are tallyd's; their text goes back with every reply, for the client to copy into
// the application's buffers (the error log also when the call fails).
#include "server/api/call_context.h"

#include "common/jit/jit_options.h"

#include <spdlog/spdlog.h>

#include <cstring>

namespace tally::server::api {

namespace {

constexpr size_t kMaxLinkInputBytes = 512u << 20;     // as module images; the frame's bulk limit is lower
constexpr uint32_t kMaxLogBytes = 1u << 20;
constexpr size_t kMaxLinkedImageBytes = 48u << 20;    // the reply must fit the client's 64-MiB message limit

bool appendValueOptions(capnp::List<wire::JitOption>::Reader in, std::vector<CUjit_option>& options,
                        std::vector<void*>& values) {
  for (auto o : in) {
    if (!jit::isValueOption(o.getOption())) return false;
    options.push_back(static_cast<CUjit_option>(o.getOption()));
    values.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(o.getValue())));
  }
  return true;
}

void appendLog(session::LinkState& link, std::vector<char>& buffer, uint32_t bytes, CUjit_option bufferOption,
               CUjit_option sizeOption) {
  if (bytes == 0) return;
  buffer.assign(bytes, '\0');
  link.options.push_back(bufferOption);
  link.values.push_back(buffer.data());
  link.options.push_back(sizeOption);
  link.values.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(bytes)));
}

std::string logText(const std::vector<char>& buffer) { return {buffer.data(), strnlen(buffer.data(), buffer.size())}; }

// Adds what the driver wrote into `buffer` since it was last looked at to `shown`.
const std::string& accumulate(const std::vector<char>& buffer, std::string& seen, std::string& shown) {
  std::string now = logText(buffer);
  if (now != seen) {
    shown += now.rfind(seen, 0) == 0 ? now.substr(seen.size()) : now;  // appended to, or started over
    seen = std::move(now);
  }
  return shown;
}

void fillResult(wire::LinkResult::Builder out, session::LinkState* link) {
  if (link == nullptr) return;
  out.setInfoLog(accumulate(link->infoLog, link->infoSeen, link->infoShown));
  out.setErrorLog(accumulate(link->errorLog, link->errorSeen, link->errorShown));
  if (link->wallTimeSlot >= 0) {
    float ms = 0;
    std::memcpy(&ms, &link->values[link->wallTimeSlot], sizeof ms);  // the driver overwrites the value itself
    out.setWallTimeMs(ms);
  }
}

void logFailure(CallContext& ctx, const char* call, uint64_t id, CUresult r) {
  spdlog::warn("tenant {} ({}): {} of link {} failed: {}", ctx.tenant().id(), ctx.tenant().name(), call, id,
               static_cast<int>(r));
}

void create(CallContext& ctx, wire::LinkCreate::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  auto link = std::make_unique<session::LinkState>();
  link->gpu = g;
  if (ctx.tenant().links().contains(args.getLink()) || args.getInfoLogBytes() > kMaxLogBytes ||
      args.getErrorLogBytes() > kMaxLogBytes || !appendValueOptions(args.getOptions(), link->options, link->values)) {
    logFailure(ctx, "cuLinkCreate", args.getLink(), CUDA_ERROR_INVALID_VALUE);
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  appendLog(*link, link->infoLog, args.getInfoLogBytes(), CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES);
  appendLog(*link, link->errorLog, args.getErrorLogBytes(), CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES);
  if (args.getWallTime()) {
    link->wallTimeSlot = static_cast<int>(link->values.size());
    link->options.push_back(CU_JIT_WALL_TIME);
    link->values.push_back(nullptr);
  }
  g->makeCurrent();
  CUresult r = cuLinkCreate(static_cast<unsigned>(link->options.size()), link->options.data(), link->values.data(),
                            &link->state);
  if (r != CUDA_SUCCESS) {
    logFailure(ctx, "cuLinkCreate", args.getLink(), r);
    return ctx.finish(r, [&](wire::Reply::Builder reply) { fillResult(reply.initLink(), link.get()); });
  }
  session::LinkState* added = link.get();
  ctx.tenant().links().add(args.getLink(), std::move(link));
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) { fillResult(reply.initLink(), added); });
}

void addData(CallContext& ctx, wire::LinkAddData::Reader args) {
  const uint64_t size = args.getSize();
  if (size > kMaxLinkInputBytes || size > ctx.bulkLeft()) {
    return ctx.protocolError("linkAddData with an oversized input");
  }
  std::string bytes(size, '\0');
  if (!ctx.readBulk(bytes.data(), bytes.size())) return;
  session::LinkState* link = ctx.tenant().links().find(args.getLink());
  std::vector<CUjit_option> options;
  std::vector<void*> values;
  CUresult r = CUDA_ERROR_INVALID_VALUE;
  if (link == nullptr) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (args.getInputType() < CU_JIT_NUM_INPUT_TYPES && appendValueOptions(args.getOptions(), options, values)) {
    link->gpu->makeCurrent();
    r = cuLinkAddData(link->state, static_cast<CUjitInputType>(args.getInputType()), bytes.data(), bytes.size(),
                      args.getName().cStr(), static_cast<unsigned>(options.size()), options.data(), values.data());
  }
  if (r != CUDA_SUCCESS) logFailure(ctx, "cuLinkAddData", args.getLink(), r);
  ctx.finish(r, [&](wire::Reply::Builder reply) { fillResult(reply.initLink(), link); });
}

void complete(CallContext& ctx, uint64_t id) {
  session::LinkState* link = ctx.tenant().links().find(id);
  if (link == nullptr) {
    logFailure(ctx, "cuLinkComplete", id, CUDA_ERROR_INVALID_HANDLE);
    return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  }
  link->gpu->makeCurrent();
  void* image = nullptr;
  size_t size = 0;
  CUresult r = cuLinkComplete(link->state, &image, &size);
  if (r == CUDA_SUCCESS && size > kMaxLinkedImageBytes) r = CUDA_ERROR_NOT_SUPPORTED;
  if (r != CUDA_SUCCESS) logFailure(ctx, "cuLinkComplete", id, r);
  ctx.finish(r, [&](wire::Reply::Builder reply) {
    auto result = reply.initLink();
    fillResult(result, link);
    if (r == CUDA_SUCCESS) result.setImage(kj::arrayPtr(static_cast<const kj::byte*>(image), size));
  });
}

void destroy(CallContext& ctx, uint64_t id) {
  std::unique_ptr<session::LinkState> link = ctx.tenant().links().take(id);
  if (link == nullptr) {
    logFailure(ctx, "cuLinkDestroy", id, CUDA_ERROR_INVALID_HANDLE);
    return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  }
  link->gpu->makeCurrent();
  ctx.finish(cuLinkDestroy(link->state));
}

}  // namespace

void handleJitLink(CallContext& ctx, wire::Call::Reader call) {
  switch (call.which()) {
    case wire::Call::LINK_CREATE: return create(ctx, call.getLinkCreate());
    case wire::Call::LINK_ADD_DATA: return addData(ctx, call.getLinkAddData());
    case wire::Call::LINK_COMPLETE: return complete(ctx, call.getLinkComplete().getLink());
    case wire::Call::LINK_DESTROY: return destroy(ctx, call.getLinkDestroy().getLink());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
