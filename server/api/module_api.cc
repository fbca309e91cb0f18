// Modules and functions. Image bytes are cached by content hash across tenants (verified on
// arrival, so one tenant cannot plant code under another's hash); each tenant loads its own
// module instance and so has its own __device__ globals.
#include "server/api/call_context.h"

#include <algorithm>
#include "server/api/request_checks.h"

#include "common/hash/content_hash.h"
#include "server/gpu/cuda_check.h"
#include "server/transform/chain.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <string>
#include <vector>

namespace tally::server::api {

namespace {

constexpr size_t kMaxImageBytes = 512u << 20;

// The compiled variant module of the tenant's family for a module with PTX (no cubin: none, or
// not yet): sliced and PTB variants for a best-effort tenant, chained ones for a high-priority
// tenant when the policy chains its kernels (scheduler::Policy::chainsHighPriority).
session::VariantImage variantsFor(CallContext& ctx, const gpu::StoredModule& module, wire::ModuleLoad::Reader args) {
  transform::VariantStore* store = ctx.services().variants;
  const bool highPriority = ctx.tenant().priority() == session::PriorityClass::kHigh;
  const scheduler::Policy* policy = ctx.services().policy;
  if (store == nullptr || (highPriority && (policy == nullptr || !policy->chainsHighPriority()))) return {};
  const std::string& ptx = module.ptx(args.getKind() == wire::ImageKind::PTX);
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());  // the tenant's numbering (CUDA_VISIBLE_DEVICES)
  if (ptx.empty() || g == nullptr) return {};
  const auto family = highPriority ? transform::VariantFamily::kHighPriority : transform::VariantFamily::kBestEffort;
  return {store->variantsFor(ptx, g->arch(), family), transform::familyName(family)};
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
  const session::VariantImage variants = variantsFor(ctx, *stored, args);
  CUresult r = ctx.tenant().loadModule(args.getDevice(), args.getModule(), hash::toHex(hash), stored->image, &variants);
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
    if (cuModuleGetFunction(&state.chained, m->module, (name + transform::kChainedSuffix).c_str()) != CUDA_SUCCESS) {
      state.chained = nullptr;
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

// The names of every function the driver finds in `module` (cuModuleEnumerateFunctions).
CUresult loadedFunctionNames(CUmodule module, std::vector<std::string>& names) {
  unsigned count = 0;
  if (CUresult r = cuModuleGetFunctionCount(&count, module); r != CUDA_SUCCESS) return r;
  std::vector<CUfunction> functions(count);
  if (count > 0) {
    if (CUresult r = cuModuleEnumerateFunctions(functions.data(), count, module); r != CUDA_SUCCESS) return r;
  }
  for (CUfunction f : functions) {
    const char* name = nullptr;
    if (CUresult r = cuFuncGetName(&name, f); r != CUDA_SUCCESS) return r;
    names.emplace_back(name);
  }
  return CUDA_SUCCESS;
}

// cuModuleEnumerateFunctions / cuLibraryEnumerateKernels: the client resolves the names it gets
// here through moduleGetFunction, so each enumerated handle is an ordinary one.
void functionNames(CallContext& ctx, wire::ModuleRef::Reader args) {
  session::ModuleState* m = ctx.tenant().modules().module(args.getModule());
  if (m == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  m->gpu->makeCurrent();
  std::vector<std::string> loaded;
  if (CUresult r = loadedFunctionNames(m->module, loaded); r != CUDA_SUCCESS) {
    spdlog::warn("tenant {} ({}): cannot list the functions of module {}: {}", ctx.tenant().id(), ctx.tenant().name(),
                 m->identity, gpu::describe(r));
    return ctx.finish(r);
  }
  std::vector<std::string> names = session::tenantFunctionNames(std::move(loaded), m->hasVariants);
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto list = reply.initFunctionNames(static_cast<unsigned>(names.size()));
    for (unsigned i = 0; i < names.size(); ++i) list.set(i, names[i]);
  });
}

void setAttribute(CallContext& ctx, wire::FuncSetAttribute::Reader args) {
  session::FunctionState* f = ctx.tenant().modules().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  f->gpu->makeCurrent();
  std::optional<CUfunction_attribute> checked = enumFromWire(args.getAttribute(), CU_FUNC_ATTRIBUTE_MAX);
  if (!checked) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUfunction_attribute attribute = *checked;
  for (CUfunction changed : {f->function, f->sliced, f->ptb, f->chained}) {
    if (changed != nullptr) ctx.tenant().modules().noteAttributeChange(f->module, changed, attribute);
  }
  CUresult r = cuFuncSetAttribute(f->function, attribute, args.getValue());
  // The variants run the same code with the same launch shape: they need the same settings
  // (e.g. a larger dynamic shared memory limit).
  for (CUfunction variant : {f->sliced, f->ptb, f->chained}) {
    if (r == CUDA_SUCCESS && variant != nullptr) cuFuncSetAttribute(variant, attribute, args.getValue());
  }
  ctx.finish(r);
}

// The launch configuration a cluster question is about; no stream (the driver does not need one).
CUresult clusterOccupancy(CUfunction function, uint64_t dynamicSmem, wire::ClusterOccupancy::Reader q, int& value) {
  CUlaunchConfig config{};
  auto grid = q.getGrid();
  auto block = q.getBlock();
  auto cluster = q.getClusterDim();
  config.gridDimX = grid.getX();
  config.gridDimY = grid.getY();
  config.gridDimZ = grid.getZ();
  config.blockDimX = block.getX();
  config.blockDimY = block.getY();
  config.blockDimZ = block.getZ();
  config.sharedMemBytes = static_cast<unsigned>(std::min<uint64_t>(dynamicSmem, UINT32_MAX));
  CUlaunchAttribute clusterDim{};
  if (cluster.getX() != 0) {
    clusterDim.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    clusterDim.value.clusterDim.x = cluster.getX();
    clusterDim.value.clusterDim.y = cluster.getY();
    clusterDim.value.clusterDim.z = cluster.getZ();
    config.attrs = &clusterDim;
    config.numAttrs = 1;
  }
  return q.getPotentialSize() ? cuOccupancyMaxPotentialClusterSize(&value, function, &config)
                              : cuOccupancyMaxActiveClusters(&value, function, &config);
}

void occupancy(CallContext& ctx, wire::Occupancy::Reader args) {
  session::FunctionState* f = ctx.tenant().modules().function(args.getFunction());
  if (f == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  f->gpu->makeCurrent();
  if (args.hasClusters()) {
    int value = 0;
    CUresult r = clusterOccupancy(f->function, args.getDynamicSmem(), args.getClusters(), value);
    return ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(static_cast<uint64_t>(value)); });
  }
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

namespace {

// A TMA descriptor names a global address the GPU will read or write: it must be the tenant's
// (checked at its base; a kernel can reach past it anyway, as with any pointer it is given).
void encodeTensorMap(CallContext& ctx, wire::TensorMapEncodeTiled::Reader in) {
  uint32_t rank = in.getRank();
  if (rank == 0 || rank > 5 || in.getGlobalDim().size() != rank || in.getBoxDim().size() != rank ||
      in.getElementStrides().size() != rank || in.getGlobalStrides().size() != rank - 1) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  gpu::Gpu* g = ctx.tenant().memory().ownerOf(in.getGlobalAddress(), 1);
  if (g == nullptr || g != ctx.tenant().gpu(in.getDevice())) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  cuuint64_t dims[5], strides[5];
  cuuint32_t box[5], elementStrides[5];
  for (uint32_t i = 0; i < rank; ++i) {
    dims[i] = in.getGlobalDim()[i];
    box[i] = in.getBoxDim()[i];
    elementStrides[i] = in.getElementStrides()[i];
    if (i + 1 < rank) strides[i] = in.getGlobalStrides()[i];
  }
  auto dataType = enumFromWire(in.getDataType(), static_cast<CUtensorMapDataType>(CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B + 1));
  auto interleave = enumFromWire(in.getInterleave(), static_cast<CUtensorMapInterleave>(CU_TENSOR_MAP_INTERLEAVE_32B + 1));
  auto swizzle = enumFromWire(in.getSwizzle(), static_cast<CUtensorMapSwizzle>(CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B + 1));
  auto l2 = enumFromWire(in.getL2Promotion(), static_cast<CUtensorMapL2promotion>(CU_TENSOR_MAP_L2_PROMOTION_L2_256B + 1));
  auto oob = enumFromWire(in.getOobFill(),
                          static_cast<CUtensorMapFloatOOBfill>(CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA + 1));
  if (!dataType || !interleave || !swizzle || !l2 || !oob) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  g->makeCurrent();
  alignas(64) CUtensorMap map{};
  CUresult r = cuTensorMapEncodeTiled(&map, *dataType, rank, reinterpret_cast<void*>(in.getGlobalAddress()), dims,
                                      strides, box, elementStrides, *interleave, *swizzle, *l2, *oob);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    reply.setTensorMap(kj::arrayPtr(reinterpret_cast<const kj::byte*>(&map), sizeof map));
  });
}

}  // namespace

void handleModule(CallContext& ctx, wire::Call::Reader call) {
  switch (call.which()) {
    case wire::Call::MODULE_LOAD: return loadModule(ctx, call.getModuleLoad());
    case wire::Call::MODULE_UNLOAD: return ctx.finish(ctx.tenant().unloadModule(call.getModuleUnload().getModule()));
    case wire::Call::MODULE_GET_FUNCTION: return getFunction(ctx, call.getModuleGetFunction());
    case wire::Call::MODULE_GET_GLOBAL: return getGlobal(ctx, call.getModuleGetGlobal());
    case wire::Call::MODULE_FUNCTION_NAMES: return functionNames(ctx, call.getModuleFunctionNames());
    case wire::Call::FUNC_SET_ATTRIBUTE: return setAttribute(ctx, call.getFuncSetAttribute());
    case wire::Call::OCCUPANCY: return occupancy(ctx, call.getOccupancy());
    case wire::Call::TENSOR_MAP_ENCODE_TILED: return encodeTensorMap(ctx, call.getTensorMapEncodeTiled());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
