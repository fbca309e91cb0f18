// Modules and functions. Image bytes are cached by content hash across tenants (verified on
// arrival, so one tenant cannot plant code under another's hash); each tenant loads its own
// module instance and so has its own __device__ globals.
#include "server/api/call_context.h"
#include "server/api/request_checks.h"

#include "common/hash/content_hash.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"

#include <spdlog/spdlog.h>

#include <cstring>

namespace tally::server::api {

namespace {

constexpr size_t kMaxImageBytes = 512u << 20;

// The compiled variant module for a best-effort tenant's module with PTX (null: none, or not yet).
// High-priority tenants always run their own code: they are never throttled, so variants would
// only cost them.
std::shared_ptr<const std::string> variantsFor(CallContext& ctx, const gpu::StoredModule& module,
                                               wire::ModuleLoad::Reader args) {
  transform::VariantStore* store = ctx.services().variants;
  if (store == nullptr || ctx.tenant().priority() != session::PriorityClass::kBestEffort) return nullptr;
  const std::string& ptx = module.ptx(args.getKind() == wire::ImageKind::PTX);
  gpu::Gpu* g = args.getDevice() < ctx.services().gpus.size() ? ctx.services().gpus[args.getDevice()] : nullptr;
  if (ptx.empty() || g == nullptr) return nullptr;
  return store->variantsFor(ptx, g->arch());
}

void loadModule(CallContext& ctx, wire::ModuleLoad::Reader args) {
  auto hashBytes = args.getHash();
  const uint64_t imageSize = args.getImageSize(), ptxSize = args.getPtxSize();
  if (hashBytes.size() != sizeof(hash::ContentHash) || imageSize > kMaxImageBytes || ptxSize > kMaxImageBytes ||
      (args.getHasImage() && imageSize + ptxSize > ctx.bulkLeft())) {
    return ctx.protocolError("moduleLoad with a malformed hash or an oversized image");
  }
  hash::ContentHash hash;
  std::memcpy(hash.data(), hashBytes.begin(), hash.size());
  std::shared_ptr<const gpu::StoredModule> stored;
  if (args.getHasImage()) {
    std::string bytes(imageSize + ptxSize, '\0');
    if (!ctx.readBulk(bytes.data(), bytes.size())) return;
    if (hash::contentHash(bytes.data(), bytes.size()) != hash) {
      spdlog::warn("tenant {} ({}): module image does not match its hash {}", ctx.tenant().id(),
                   ctx.tenant().name(), hash::toHex(hash));
      return ctx.finish(CUDA_ERROR_INVALID_IMAGE);
    }
    gpu::StoredModule module{bytes.substr(0, imageSize), bytes.substr(imageSize)};
    stored = ctx.services().modules->insert(hash, std::move(module));
  } else {
    stored = ctx.services().modules->find(hash);
    if (!stored) {
      return ctx.finish(CUDA_SUCCESS, [](wire::Reply::Builder reply) { reply.initModuleLoad().setNeedImage(true); });
    }
  }
  std::shared_ptr<const std::string> variants = variantsFor(ctx, *stored, args);
  CUresult r =
      ctx.tenant().loadModule(args.getDevice(), args.getModule(), hash::toHex(hash), stored->image, variants.get());
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
  session::ModuleState* m = ctx.tenant().modules().module(args.getModule());
  if (m == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  m->gpu->makeCurrent();
  CUfunction f = nullptr;
  if (CUresult r = cuModuleGetFunction(&f, m->module, args.getName().cStr()); r != CUDA_SUCCESS) return ctx.finish(r);
  session::FunctionState state;
  state.gpu = m->gpu;
  state.function = f;
  state.params = paramLayout(f);
  state.module = args.getModule();
  state.profileKey = m->identity + "/" + args.getName().cStr();
  for (auto [offset, size] : state.params) state.paramBytes = std::max<size_t>(state.paramBytes, offset + size);
  if (m->hasVariants) {
    std::string name = args.getName().cStr();
    if (cuModuleGetFunction(&state.sliced, m->module, (name + transform::kSlicedSuffix).c_str()) != CUDA_SUCCESS) {
      state.sliced = nullptr;
    }
    if (cuModuleGetFunction(&state.ptb, m->module, (name + transform::kPtbSuffix).c_str()) != CUDA_SUCCESS) {
      state.ptb = nullptr;
    }
  }
  const session::FunctionState& fn = ctx.tenant().modules().addFunction(args.getFunction(), std::move(state));
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
  session::ModuleState* m = ctx.tenant().modules().module(args.getModule());
  if (m == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  m->gpu->makeCurrent();
  CUdeviceptr ptr = 0;
  size_t size = 0;
  CUresult r = cuModuleGetGlobal(&ptr, &size, m->module, args.getName().cStr());
  if (r == CUDA_SUCCESS) ctx.tenant().memory().addGlobal(ptr, size, m->gpu, args.getModule());
  ctx.finish(r, [&](wire::Reply::Builder reply) {
    auto global = reply.initGlobal();
    global.setPtr(ptr);
    global.setSize(size);
  });
}

void setAttribute(CallContext& ctx, wire::FuncSetAttribute::Reader args) {
  session::FunctionState* f = ctx.tenant().modules().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  f->gpu->makeCurrent();
  std::optional<CUfunction_attribute> checked = enumFromWire(args.getAttribute(), CU_FUNC_ATTRIBUTE_MAX);
  if (!checked) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUfunction_attribute attribute = *checked;
  for (CUfunction changed : {f->function, f->sliced, f->ptb}) {
    if (changed != nullptr) ctx.tenant().modules().noteAttributeChange(f->module, changed, attribute);
  }
  CUresult r = cuFuncSetAttribute(f->function, attribute, args.getValue());
  // The variants run the same code with the same launch shape: they need the same settings
  // (e.g. a larger dynamic shared memory limit).
  for (CUfunction variant : {f->sliced, f->ptb}) {
    if (r == CUDA_SUCCESS && variant != nullptr) cuFuncSetAttribute(variant, attribute, args.getValue());
  }
  ctx.finish(r);
}

void occupancy(CallContext& ctx, wire::Occupancy::Reader args) {
  session::FunctionState* f = ctx.tenant().modules().function(args.getFunction());
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
