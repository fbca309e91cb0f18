// Kernel launches: one-way messages. Arguments are packed by the kernel's parameter layout
// (from cuFuncGetParamInfo on tallyd), so structs of any size travel as they are.
#include "client/api/api_util.h"
#include "client/runtime/arguments.h"

#include <cstring>
#include <vector>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t sharedMem = 0;
};

struct LaunchAttr {
  uint32_t id;
  unsigned x, y, z;
};

// What the runtime rejects before a launch reaches the GPU.
bool validShape(const LaunchShape& s, const DeviceView& d) {
  auto threads = static_cast<uint64_t>(s.block.x) * s.block.y * s.block.z;
  if (threads == 0 || s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0) return false;
  if (threads > static_cast<uint64_t>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK))) return false;
  if (s.block.x > static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)) ||
      s.block.y > static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)) ||
      s.block.z > static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z))) {
    return false;
  }
  return s.grid.x <= static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)) &&
         s.grid.y <= static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)) &&
         s.grid.z <= static_cast<unsigned>(d.attribute(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z));
}

// What the function opted into (48 KiB unless cudaFuncSetAttribute raised it).
size_t maxDynamicSharedMemory(const FunctionHandle& f) {
  return f.attributes.size() > CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
             ? static_cast<size_t>(f.attributes[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES])
             : size_t{48} << 10;
}

// A cooperative grid must be resident all at once; the runtime refuses larger ones up front.
CUresult checkCooperativeFits(const FunctionHandle& f, const LaunchShape& s) {
  uint64_t perSm = 0;
  CUresult r = rt().queryOccupancy(
      f, ClientRuntime::OccupancyQuery::maxActiveBlocks(static_cast<int>(s.block.x * s.block.y * s.block.z), s.sharedMem, 0),
      perSm);
  if (r != CUDA_SUCCESS) return r;
  uint64_t sms = static_cast<uint64_t>(rt().device(static_cast<int>(f.module->device)).attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  uint64_t blocks = static_cast<uint64_t>(s.grid.x) * s.grid.y * s.grid.z;
  return blocks > perSm * sms ? CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE : CUDA_SUCCESS;
}

std::vector<uint8_t> packArguments(const FunctionHandle& f, void** args) {
  return tally::client::packArguments(f.params, f.paramBytes, args);
}

CUresult launch(FunctionHandle* f, const LaunchShape& shape, CUstream stream, const std::vector<uint8_t>& params,
                bool cooperative, const std::vector<LaunchAttr>& attributes = {}) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!validShape(shape, rt().device(static_cast<int>(f->module->device)))) {
    return CUDA_ERROR_INVALID_VALUE;  // CUDA 13's runtime reports bad shapes as cudaErrorInvalidValue too
  }
  if (shape.sharedMem > maxDynamicSharedMemory(*f)) return CUDA_ERROR_INVALID_VALUE;
  if (cooperative) {
    if (CUresult r = checkCooperativeFits(*f, shape); r != CUDA_SUCCESS) return r;
  }
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  return rt().post([&](wire::Call::Builder c) {
    auto l = c.initLaunchKernel();
    l.setFunction(f->id);
    setDim3(l.initGrid(), shape.grid.x, shape.grid.y, shape.grid.z);
    setDim3(l.initBlock(), shape.block.x, shape.block.y, shape.block.z);
    l.setSharedMem(static_cast<uint32_t>(shape.sharedMem));
    l.setStream(streamId);
    l.setParams(kj::arrayPtr(params.data(), params.size()));
    l.setCooperative(cooperative);
    if (!attributes.empty()) {
      auto out = l.initAttributes(static_cast<unsigned>(attributes.size()));
      for (unsigned i = 0; i < attributes.size(); ++i) {
        out[i].setId(attributes[i].id);
        setDim3(out[i].initValue(), attributes[i].x, attributes[i].y, attributes[i].z);
      }
    }
  });
}

CUresult launchRuntime(const void* func, dim3 grid, dim3 block, void** args, size_t sharedMem, cudaStream_t stream,
                       bool cooperative, const std::vector<LaunchAttr>& attributes = {}) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  FunctionHandle* f = nullptr;
  if (CUresult r = rt().runtimeFunction(func, currentDevice(), f); r != CUDA_SUCCESS) return r;
  return launch(f, LaunchShape{grid, block, sharedMem}, stream, packArguments(*f, args), cooperative, attributes);
}

// One launch attribute, sorted by what tallyd does with it. Forwarded: what tallyd applies
// without touching other tenants (priority within the tenant's band, clusters, cluster
// scheduling, cooperative, programmatic stream serialization). Dropped: hints whose absence only
// leaves a setting at its default (memory-sync domains, L2 access windows, the synchronization
// policy, the shared-memory carveout): the kernel runs as an ordinary launch does. Anything else
// (completion events, graph-only attributes) is refused.
CUresult addAttribute(const CUlaunchAttribute& a, std::vector<LaunchAttr>& out, bool& cooperative) {
  switch (a.id) {
    case CU_LAUNCH_ATTRIBUTE_IGNORE:
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
      cooperative = cooperative || a.value.cooperative != 0;
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      out.push_back({a.id, static_cast<unsigned>(a.value.priority), 0, 0});
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
      out.push_back({a.id, a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z});
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      out.push_back({a.id, static_cast<unsigned>(a.value.clusterSchedulingPolicyPreference), 0, 0});
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
      if (a.value.programmaticStreamSerializationAllowed != 0) out.push_back({a.id, 1, 0, 0});
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return CUDA_SUCCESS;
    default:
      spdlog::warn("tally: launch attribute {} is not supported", static_cast<int>(a.id));
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult translateAttributes(const CUlaunchAttribute* attrs, unsigned count, std::vector<LaunchAttr>& out,
                             bool& cooperative) {
  for (unsigned i = 0; attrs != nullptr && i < count; ++i) {
    if (CUresult r = addAttribute(attrs[i], out, cooperative); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// The runtime's attributes are the driver's under other names: same ids, same value layout.
static_assert(sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(static_cast<int>(cudaLaunchAttributeProgrammaticStreamSerialization) ==
              static_cast<int>(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION));
CUresult translateAttributes(const cudaLaunchAttribute* attrs, unsigned count, std::vector<LaunchAttr>& out,
                             bool& cooperative) {
  for (unsigned i = 0; attrs != nullptr && i < count; ++i) {
    CUlaunchAttribute driver{};
    driver.id = static_cast<CUlaunchAttributeID>(attrs[i].id);
    std::memcpy(&driver.value, &attrs[i].val, sizeof(driver.value));
    if (CUresult r = addAttribute(driver, out, cooperative); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

// --- runtime -----------------------------------------------------------------------------------

TALLY_API unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t sharedMem, void* stream) {
  threadState().launchConfigs.push_back({grid, block, sharedMem, static_cast<cudaStream_t>(stream)});
  return 0;
}

TALLY_API cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* sharedMem, void* stream) {
  auto& configs = threadState().launchConfigs;
  if (configs.empty()) return cudaErrorMissingConfiguration;
  ThreadState::LaunchConfig c = configs.back();
  configs.pop_back();
  *grid = c.grid;
  *block = c.block;
  *sharedMem = c.sharedMem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

TALLY_API cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t sharedMem,
                                       cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return launchRuntime(func, grid, block, args, sharedMem, stream, false); });
}

TALLY_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t sharedMem,
                                         cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return launchRuntime(kernel, grid, block, args, sharedMem, stream, false); });
}

// Per-thread default stream builds: a null stream means the calling thread's own stream.
TALLY_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                              size_t sharedMem, cudaStream_t stream) {
  if (stream == nullptr) stream = cudaStreamPerThread;
  return __cudaLaunchKernel(kernel, grid, block, args, sharedMem, stream);
}

TALLY_API cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                                  size_t sharedMem, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return launchRuntime(func, grid, block, args, sharedMem, stream, true); });
}

TALLY_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return guardRuntime(__func__, [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::vector<LaunchAttr> attributes;
    bool cooperative = false;
    if (CUresult r = translateAttributes(config->attrs, config->numAttrs, attributes, cooperative); r != CUDA_SUCCESS) {
      return r;
    }
    return launchRuntime(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes, config->stream,
                         cooperative, attributes);
  });
}

// --- driver ------------------------------------------------------------------------------------

namespace {

// `extra` may carry the whole parameter buffer instead of `params`.
CUresult driverArguments(const FunctionHandle& f, void** params, void** extra, std::vector<uint8_t>& out) {
  if (params != nullptr) {
    out = packArguments(f, params);
    return CUDA_SUCCESS;
  }
  const void* buffer = nullptr;
  size_t size = 0;
  for (void** e = extra; e != nullptr && *e != CU_LAUNCH_PARAM_END; e += 2) {
    if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = e[1];
    if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t*>(e[1]);
  }
  if (buffer == nullptr && f.paramBytes > 0) return CUDA_ERROR_INVALID_VALUE;
  if (size < f.paramBytes) return CUDA_ERROR_INVALID_VALUE;
  out.assign(static_cast<const uint8_t*>(buffer), static_cast<const uint8_t*>(buffer) + f.paramBytes);
  return CUDA_SUCCESS;
}

CUresult launchDriver(CUfunction function, LaunchShape shape, CUstream stream, void** params, void** extra,
                      bool cooperative, const std::vector<LaunchAttr>& attributes = {}) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  FunctionHandle* f = checkedHandle<FunctionHandle>(function, HandleMagic::kFunction);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<uint8_t> buffer;
  if (CUresult r = driverArguments(*f, params, extra, buffer); r != CUDA_SUCCESS) return r;
  return launch(f, shape, stream, buffer, cooperative, attributes);
}

}  // namespace

TALLY_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                  unsigned bz, unsigned sharedMem, CUstream stream, void** params, void** extra) {
  return guardDriver(__func__, [&] {
    return launchDriver(f, LaunchShape{dim3(gx, gy, gz), dim3(bx, by, bz), sharedMem}, stream, params, extra, false);
  });
}

TALLY_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                             unsigned by, unsigned bz, unsigned sharedMem, CUstream stream,
                                             void** params) {
  return guardDriver(__func__, [&] {
    return launchDriver(f, LaunchShape{dim3(gx, gy, gz), dim3(bx, by, bz), sharedMem}, stream, params, nullptr, true);
  });
}

TALLY_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  return guardDriver(__func__, [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::vector<LaunchAttr> attributes;
    bool cooperative = false;
    if (CUresult r = translateAttributes(config->attrs, config->numAttrs, attributes, cooperative); r != CUDA_SUCCESS) {
      return r;
    }
    LaunchShape shape{dim3(config->gridDimX, config->gridDimY, config->gridDimZ),
                      dim3(config->blockDimX, config->blockDimY, config->blockDimZ), config->sharedMemBytes};
    return launchDriver(f, shape, config->hStream, params, extra, cooperative, attributes);
  });
}
