// Modules and functions. Image bytes are cached by content hash across tenants (verified on
// arrival, so one tenant cannot plant code under another's hash); each tenant loads its own
// module instance and so has its own __device__ globals.
#include "server/api/call_context.h"

#include "common/hash/content_hash.h"

#include <spdlog/spdlog.h>

#include <cstring>

namespace tally::server::api {

namespace {

constexpr size_t kMaxImageBytes = 512u << 20;

void loadModule(CallContext& ctx, wire::ModuleLoad::Reader args) {
  auto hashBytes = args.getHash();
  if (hashBytes.size() != sizeof(hash::ContentHash) || args.getImageSize() > kMaxImageBytes ||
      (args.getHasImage() && args.getImageSize() > ctx.bulkLeft())) {
    return ctx.protocolError("moduleLoad with a malformed hash or an oversized image");
  }
  hash::ContentHash hash;
  std::memcpy(hash.data(), hashBytes.begin(), hash.size());
  std::shared_ptr<const std::string> image;
  if (args.getHasImage()) {
    std::string bytes(args.getImageSize(), '\0');
    if (!ctx.readBulk(bytes.data(), bytes.size())) return;
    if (hash::contentHash(bytes.data(), bytes.size()) != hash) {
      spdlog::warn("tenant {} ({}): module image does not match its hash {}", ctx.tenant().id(),
                   ctx.tenant().name(), hash::toHex(hash));
      return ctx.finish(CUDA_ERROR_INVALID_IMAGE);
    }
    image = ctx.services().modules->insert(hash, std::move(bytes));
  } else {
    image = ctx.services().modules->find(hash);
    if (!image) {
      return ctx.finish(CUDA_SUCCESS, [](wire::Reply::Builder reply) { reply.initModuleLoad().setNeedImage(true); });
    }
  }
  CUresult r = ctx.tenant().loadModule(args.getDevice(), args.getModule(), *image);
  if (r != CUDA_SUCCESS) {
    spdlog::warn("tenant {} ({}): cannot load module {}: CUresult {}", ctx.tenant().id(), ctx.tenant().name(),
                 hash::toHex(hash), static_cast<int>(r));
  }
  ctx.finish(r, [](wire::Reply::Builder reply) { reply.initModuleLoad().setNeedImage(false); });
}

std::vector<std::pair<uint32_t, uint32_t>> paramLayout(CUfunction f) {
  std::vector<std::pair<uint32_t, uint32_t>> params;
  for (size_t i = 0;; ++i) {
    size_t offset = 0, size = 0;
    if (cuFuncGetParamInfo(f, i, &offset, &size) != CUDA_SUCCESS) break;
    params.emplace_back(static_cast<uint32_t>(offset), static_cast<uint32_t>(size));
  }
  return params;
}

void getFunction(CallContext& ctx, wire::ModuleGetFunction::Reader args) {
  session::ModuleState* m = ctx.tenant().module(args.getModule());
  if (m == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  m->gpu->makeCurrent();
  CUfunction f = nullptr;
  if (CUresult r = cuModuleGetFunction(&f, m->module, args.getName().cStr()); r != CUDA_SUCCESS) return ctx.finish(r);
  session::FunctionState state{m->gpu, f, paramLayout(f), 0};
  for (auto [offset, size] : state.params) state.paramBytes = std::max<size_t>(state.paramBytes, offset + size);
  const session::FunctionState& fn = ctx.tenant().addFunction(args.getFunction(), std::move(state));
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto info = reply.initFunction();
    auto params = info.initParams(static_cast<unsigned>(fn.params.size()));
    for (unsigned i = 0; i < fn.params.size(); ++i) {
      params[i].setOffset(fn.params[i].first);
      params[i].setSize(fn.params[i].second);
    }
    auto attributes = info.initAttributes(CU_FUNC_ATTRIBUTE_MAX);
    for (int a = 0; a < CU_FUNC_ATTRIBUTE_MAX; ++a) {
      int value = 0;
      cuFuncGetAttribute(&value, static_cast<CUfunction_attribute>(a), f);
      attributes.set(a, value);
    }
  });
}

void getGlobal(CallContext& ctx, wire::ModuleGetGlobal::Reader args) {
  session::ModuleState* m = ctx.tenant().module(args.getModule());
  if (m == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  m->gpu->makeCurrent();
  CUdeviceptr ptr = 0;
  size_t size = 0;
  CUresult r = cuModuleGetGlobal(&ptr, &size, m->module, args.getName().cStr());
  if (r == CUDA_SUCCESS) ctx.tenant().addGlobalRange(ptr, size, m->gpu);
  ctx.finish(r, [&](wire::Reply::Builder reply) {
    auto global = reply.initGlobal();
    global.setPtr(ptr);
    global.setSize(size);
  });
}

void setAttribute(CallContext& ctx, wire::FuncSetAttribute::Reader args) {
  session::FunctionState* f = ctx.tenant().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  f->gpu->makeCurrent();
  ctx.finish(cuFuncSetAttribute(f->function, static_cast<CUfunction_attribute>(args.getAttribute()), args.getValue()));
}

void occupancy(CallContext& ctx, wire::Occupancy::Reader args) {
  session::FunctionState* f = ctx.tenant().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  f->gpu->makeCurrent();
  if (args.getAvailableDynamicSmem()) {
    size_t bytes = 0;
    CUresult r = cuOccupancyAvailableDynamicSMemPerBlock(&bytes, f->function, args.getNumBlocks(), args.getBlockSize());
    return ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(bytes); });
  }
  int blocks = 0;
  CUresult r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, f->function, args.getBlockSize(),
                                                                    args.getDynamicSmem(), args.getFlags());
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(static_cast<uint64_t>(blocks)); });
}

}  // namespace

void handleModule(CallContext& ctx, wire::Call::Reader call) {
  switch (call.which()) {
    case wire::Call::MODULE_LOAD: return loadModule(ctx, call.getModuleLoad());
    case wire::Call::MODULE_UNLOAD: return ctx.finish(ctx.tenant().unloadModule(call.getModuleUnload().getModule()));
    case wire::Call::MODULE_GET_FUNCTION: return getFunction(ctx, call.getModuleGetFunction());
    case wire::Call::MODULE_GET_GLOBAL: return getGlobal(ctx, call.getModuleGetGlobal());
    case wire::Call::FUNC_SET_ATTRIBUTE: return setAttribute(ctx, call.getFuncSetAttribute());
    case wire::Call::OCCUPANCY: return occupancy(ctx, call.getOccupancy());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
