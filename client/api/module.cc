// Modules, kernels and variables. Registration at load time only records pointers (import
// torch registers 21k functions); modules reach tallyd when one of their kernels is first
// used, by content hash, so the bytes cross the wire once per server.
#include "client/api/api_util.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

// A runtime `func`: a host function or any cudaKernel_t (ClientRuntime::runtimeFunction).
CUresult runtimeFunction(const void* func, FunctionHandle*& out) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  return rt().runtimeFunction(func, currentDevice(), out);
}

CUresult functionAttribute(FunctionHandle* f, int attribute, int* value) {
  if (f == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attribute < 0 || static_cast<size_t>(attribute) >= f->attributes.size()) return CUDA_ERROR_INVALID_VALUE;
  *value = f->attributes[attribute];
  return CUDA_SUCCESS;
}

CUresult setFunctionAttribute(FunctionHandle* f, int attribute, int value) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto s = c.initFuncSetAttribute();
    s.setFunction(f->id);
    s.setAttribute(attribute);
    s.setValue(value);
  });
  if (r == CUDA_SUCCESS && attribute >= 0 && static_cast<size_t>(attribute) < f->attributes.size()) {
    f->attributes[attribute] = value;
  }
  return r;
}

// cuOccupancyAvailableDynamicSMemPerBlock / its runtime twin.
CUresult availableDynamicSmem(FunctionHandle* f, size_t* bytes, int numBlocks, int blockSize) {
  if (f == nullptr || bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t value = 0;
  CUresult r = rt().queryOccupancy(*f, ClientRuntime::OccupancyQuery::availableSmem(blockSize, numBlocks), value);
  if (r == CUDA_SUCCESS) *bytes = value;
  return r;
}

// cuOccupancyMaxActiveClusters / MaxPotentialClusterSize and their runtime twins: the
// configuration's grid, block, dynamic shared memory and cluster attribute, asked of tallyd.
CUresult clusterOccupancy(FunctionHandle* f, int* value, ClientRuntime::OccupancyQuery::Clusters clusters,
                          size_t dynamicSmem) {
  if (f == nullptr || value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ClientRuntime::OccupancyQuery q;
  q.dynamicSmem = dynamicSmem;
  q.clusters = clusters;
  uint64_t answer = 0;
  CUresult r = rt().queryOccupancy(*f, q, answer);
  if (r == CUDA_SUCCESS) *value = static_cast<int>(answer);
  return r;
}

ClientRuntime::OccupancyQuery::Clusters clustersOf(const CUlaunchConfig& c, bool potentialSize) {
  ClientRuntime::OccupancyQuery::Clusters q{{c.gridDimX, c.gridDimY, c.gridDimZ},
                                            {c.blockDimX, c.blockDimY, c.blockDimZ}, {}, potentialSize};
  for (unsigned i = 0; c.attrs != nullptr && i < c.numAttrs; ++i) {
    if (c.attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& d = c.attrs[i].value.clusterDim;
    q.clusterDim = {d.x, d.y, d.z};
  }
  return q;
}

ClientRuntime::OccupancyQuery::Clusters clustersOf(const cudaLaunchConfig_t& c, bool potentialSize) {
  ClientRuntime::OccupancyQuery::Clusters q{{c.gridDim.x, c.gridDim.y, c.gridDim.z},
                                            {c.blockDim.x, c.blockDim.y, c.blockDim.z}, {}, potentialSize};
  for (unsigned i = 0; c.attrs != nullptr && i < c.numAttrs; ++i) {
    if (c.attrs[i].id != cudaLaunchAttributeClusterDimension) continue;
    const auto& d = c.attrs[i].val.clusterDim;
    q.clusterDim = {d.x, d.y, d.z};
  }
  return q;
}

CUresult occupancy(FunctionHandle* f, int* blocks, int blockSize, size_t dynamicSmem, unsigned flags) {
  if (f == nullptr || blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t value = 0;
  CUresult r = rt().queryOccupancy(*f, ClientRuntime::OccupancyQuery::maxActiveBlocks(blockSize, dynamicSmem, flags), value);
  if (r == CUDA_SUCCESS) *blocks = static_cast<int>(value);
  return r;
}

void fillFuncAttributes(const FunctionHandle& f, cudaFuncAttributes& a) {
  auto at = [&](CUfunction_attribute i) { return static_cast<size_t>(i) < f.attributes.size() ? f.attributes[i] : 0; };
  a = cudaFuncAttributes{};
  a.sharedSizeBytes = static_cast<size_t>(at(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
  a.constSizeBytes = static_cast<size_t>(at(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
  a.localSizeBytes = static_cast<size_t>(at(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
  a.maxThreadsPerBlock = at(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  a.numRegs = at(CU_FUNC_ATTRIBUTE_NUM_REGS);
  a.ptxVersion = at(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  a.binaryVersion = at(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  a.cacheModeCA = at(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA);
  a.maxDynamicSharedSizeBytes = at(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  a.preferredShmemCarveout = at(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
  a.clusterDimMustBeSet = at(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET);
  a.requiredClusterWidth = at(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH);
  a.requiredClusterHeight = at(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT);
  a.requiredClusterDepth = at(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH);
  a.clusterSchedulingPolicyPreference = at(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE);
  a.nonPortableClusterSizeAllowed = at(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
}

CUresult loadModule(ModuleHandle** out, const void* image) {
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return rt().loadModuleImage(image, currentDevice(), *out);
}

// A library loaded without code for its device (ClientRuntime::libraryWithoutCode) has nothing
// to look up.
CUresult lookupIn(const ModuleHandle* module) {
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return module->id == 0 ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_SUCCESS;
}

CUresult getFunction(FunctionHandle** out, ModuleHandle* module, const char* name) {
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = lookupIn(module); r != CUDA_SUCCESS) return r;
  return rt().functionOf(module, name, *out);
}

// cuLibraryLoadData and kin: an image with nothing for this GPU still loads, as natively.
CUresult loadLibrary(ModuleHandle** out, const std::function<CUresult()>& load) {
  CUresult r = load();
  if (r == CUDA_ERROR_NO_BINARY_FOR_GPU && out != nullptr) {
    *out = rt().libraryWithoutCode(currentDevice());
    return CUDA_SUCCESS;
  }
  return r;
}

// cuModuleLoad / cuLibraryLoadFromFile (torch.compile's kernels are cubin files): the client
// reads the file — the application's file system, not tallyd's — and loads its bytes. A PTX file
// is text: the image must end with its NUL.
CUresult loadModuleFile(ModuleHandle** out, const char* path) {
  if (out == nullptr || path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::string image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (image.empty()) return CUDA_ERROR_INVALID_IMAGE;
  image.push_back('\0');
  return loadModule(out, image.data());
}

ModuleHandle* asModule(const void* p) { return checkedHandle<ModuleHandle>(p, HandleMagic::kModule); }
FunctionHandle* asFunction(const void* p) { return checkedHandle<FunctionHandle>(p, HandleMagic::kFunction); }

// A CUkernel is a cudaKernel_t cast (CUDA allows both directions): a FunctionHandle from
// cuLibraryGetKernel / cudaLibraryGetKernel, or a KernelRecord from cudaGetKernel, whose function
// is the one on the current device. A host function pointer is no CUkernel.
CUresult kernelFunction(const void* kernel, FunctionHandle*& out) {
  if (FunctionHandle* f = asFunction(kernel); f != nullptr) {
    out = f;
    return CUDA_SUCCESS;
  }
  KernelRecord* record = rt().kernelFor(kernel);
  if (record == nullptr || static_cast<const void*>(record) != kernel) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  return rt().functionOf(record, currentDevice(), out);
}

CUresult functionName(FunctionHandle* f, const void* handle, const char** name) {
  if (name == nullptr || handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();  // the handle stays allocated, even after an unload
  return CUDA_SUCCESS;
}

// cuModuleGetGlobal and the library versions: one of `ptr` and `bytes` may be null, not both.
CUresult moduleGlobal(ModuleHandle* m, const char* name, CUdeviceptr* ptr, size_t* bytes) {
  if (name == nullptr || (ptr == nullptr && bytes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = lookupIn(m); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto g = c.initModuleGetGlobal();
    g.setModule(m->id);
    g.setName(name);
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  auto global = reply.reply().getGlobal();
  rt().addDeviceRegion(global.getPtr(), {.size = global.getSize(), .device = m->device});
  if (ptr != nullptr) *ptr = global.getPtr();
  if (bytes != nullptr) *bytes = global.getSize();
  return CUDA_SUCCESS;
}

// The names of a module's kernels, in the driver's order. Only tallyd knows them: the image may
// be PTX, a fatbin or a cubin, and tallyd's driver has it loaded.
CUresult functionNames(ModuleHandle* m, std::vector<std::string>& names) {
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initModuleFunctionNames().setModule(m->id); }, &reply);
  if (r != CUDA_SUCCESS) return r;
  if (!reply.reply().isFunctionNames()) return CUDA_ERROR_UNKNOWN;
  for (auto name : reply.reply().getFunctionNames()) names.emplace_back(name.cStr());
  return CUDA_SUCCESS;
}

// cuModuleGetFunctionCount, cuLibraryGetKernelCount and the runtime's.
CUresult functionCount(unsigned* count, ModuleHandle* m) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = lookupIn(m); r != CUDA_SUCCESS) return r;
  std::vector<std::string> names;
  if (CUresult r = functionNames(m, names); r != CUDA_SUCCESS) return r;
  *count = static_cast<unsigned>(names.size());
  return CUDA_SUCCESS;
}

// cuModuleEnumerateFunctions, cuLibraryEnumerateKernels and the runtime's: the first `capacity`
// kernels (all of them when there are fewer), each an ordinary handle, as cuModuleGetFunction's.
CUresult enumerateFunctions(FunctionHandle** out, unsigned capacity, ModuleHandle* m) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = lookupIn(m); r != CUDA_SUCCESS) return r;
  std::vector<std::string> names;
  if (CUresult r = functionNames(m, names); r != CUDA_SUCCESS) return r;
  const size_t filled = std::min<size_t>(capacity, names.size());
  for (size_t i = 0; i < filled; ++i) {
    if (CUresult r = rt().functionOf(m, names[i].c_str(), out[i]); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

// --- registration (hidden runtime entry points nvcc's host code calls) --------------------

TALLY_API void** __cudaRegisterFatBinary(void* fatCubin) {
  return reinterpret_cast<void**>(ClientRuntime::get().registerFatbin(fatCubin));
}

TALLY_API void __cudaRegisterFatBinaryEnd(void**) {}

// Modules are released with the connection; nothing to do at exit.
TALLY_API void __cudaUnregisterFatBinary(void**) {}

TALLY_API void __cudaRegisterFunction(void** handle, const char* hostFun, char*, const char* deviceName, int, uint3*,
                                      uint3*, dim3*, dim3*, int*) {
  ClientRuntime::get().registerKernel(reinterpret_cast<FatbinRecord*>(handle), hostFun, deviceName);
}

TALLY_API void __cudaRegisterVar(void** handle, char* hostVar, char*, const char* deviceName, int, size_t size, int,
                                 int) {
  ClientRuntime::get().registerVariable(reinterpret_cast<FatbinRecord*>(handle), hostVar, deviceName, size);
}

TALLY_API char __cudaInitModule(void**) { return 1; }

TALLY_API cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* hostFun) {
  if (kernel == nullptr) return finishRuntime(cudaErrorInvalidValue);
  KernelRecord* k = ClientRuntime::get().kernelFor(hostFun);
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return k != nullptr ? cudaSuccess : finishRuntime(cudaErrorInvalidDeviceFunction);
}

// --- runtime ---------------------------------------------------------------------------------

TALLY_API cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  return guardRuntime(__func__, [&] {
    if (attr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    fillFuncAttributes(*f, *attr);
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  return guardRuntime(__func__, [&] {
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    return setFunctionAttribute(f, attr, value);  // cudaFuncAttribute == CUfunction_attribute from 8 on
  });
}

TALLY_API cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache) {
  return guardRuntime(__func__, [&] {
    FunctionHandle* f = nullptr;
    return runtimeFunction(func, f);  // a preference only; the shared context keeps its own
  });
}

TALLY_API cudaError_t cudaFuncSetSharedMemConfig(const void* func, cudaSharedMemConfig) {
  return cudaFuncSetCacheConfig(func, cudaFuncCachePreferNone);
}

TALLY_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func,
                                                                            int blockSize, size_t dynamicSmem,
                                                                            unsigned int flags) {
  return guardRuntime(__func__, [&] {
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    return occupancy(f, blocks, blockSize, dynamicSmem, flags);
  });
}

TALLY_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int blockSize,
                                                                   size_t dynamicSmem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, func, blockSize, dynamicSmem, 0);
}

TALLY_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, const void* func, int numBlocks,
                                                               int blockSize) {
  return guardRuntime(__func__, [&] {
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    return availableDynamicSmem(f, bytes, numBlocks, blockSize);
  });
}

namespace {
cudaError_t runtimeClusterOccupancy(const char* api, int* value, const void* func, const cudaLaunchConfig_t* config,
                                    bool potentialSize) {
  return guardRuntime(api, [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    return clusterOccupancy(f, value, clustersOf(*config, potentialSize), config->dynamicSmemBytes);
  });
}
}  // namespace

TALLY_API cudaError_t cudaOccupancyMaxActiveClusters(int* numClusters, const void* func, const cudaLaunchConfig_t* config) {
  return runtimeClusterOccupancy(__func__, numClusters, func, config, false);
}

TALLY_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int* clusterSize, const void* func,
                                                           const cudaLaunchConfig_t* config) {
  return runtimeClusterOccupancy(__func__, clusterSize, func, config, true);
}

TALLY_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t* out, const void* symbol) {
  return guardRuntime(__func__, [&] {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(symbol, f); r != CUDA_SUCCESS) return r;
    *out = reinterpret_cast<cudaFunction_t>(f);
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaFuncGetName(const char** name, const void* func) {
  return guardRuntime(__func__, [&] {
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    return functionName(f, func, name);
  });
}

TALLY_API cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset,
                                           size_t* paramSize) {
  return guardRuntime(__func__, [&] {
    FunctionHandle* f = nullptr;
    if (CUresult r = runtimeFunction(func, f); r != CUDA_SUCCESS) return r;
    if (paramIndex >= f->params.size()) return CUDA_ERROR_INVALID_VALUE;
    if (paramOffset != nullptr) *paramOffset = f->params[paramIndex].first;
    if (paramSize != nullptr) *paramSize = f->params[paramIndex].second;
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

// --- runtime library management ---------------------------------------------------------------
// A cudaLibrary_t is a ModuleHandle (as a CUlibrary), loaded on the current device; a cudaKernel_t
// from it is a FunctionHandle (as a CUkernel), so the two APIs' handles cast into each other as
// CUDA allows. cudaLibraryGetManaged and cudaLibraryGetUnifiedFunction stay NotSupported (see the
// driver's cuLibraryGetManaged below).

TALLY_API cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption*, void**,
                                          unsigned int, cudaLibraryOption*, void**, unsigned int) {
  return guardRuntime(__func__, [&] {
    auto** out = reinterpret_cast<ModuleHandle**>(library);
    return loadLibrary(out, [&] { return loadModule(out, code); });
  });
}

TALLY_API cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* fileName, cudaJitOption*, void**,
                                              unsigned int, cudaLibraryOption*, void**, unsigned int) {
  return guardRuntime(__func__, [&] {
    auto** out = reinterpret_cast<ModuleHandle**>(library);
    return loadLibrary(out, [&] { return loadModuleFile(out, fileName); });
  });
}

TALLY_API cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  return guardRuntime(__func__, [&] {
    ModuleHandle* m = asModule(library);
    return m == nullptr ? CUDA_ERROR_INVALID_HANDLE : rt().unloadModule(m);
  });
}

TALLY_API cudaError_t cudaLibraryGetKernel(cudaKernel_t* pKernel, cudaLibrary_t library, const char* name) {
  return guardRuntime(__func__, [&] {
    return getFunction(reinterpret_cast<FunctionHandle**>(pKernel), asModule(library), name);
  });
}

TALLY_API cudaError_t cudaLibraryGetKernelCount(unsigned int* count, cudaLibrary_t lib) {
  return guardRuntime(__func__, [&] { return functionCount(count, asModule(lib)); });
}

TALLY_API cudaError_t cudaLibraryEnumerateKernels(cudaKernel_t* kernels, unsigned int numKernels, cudaLibrary_t lib) {
  return guardRuntime(__func__, [&] {
    return enumerateFunctions(reinterpret_cast<FunctionHandle**>(kernels), numKernels, asModule(lib));
  });
}

TALLY_API cudaError_t cudaLibraryGetGlobal(void** dptr, size_t* bytes, cudaLibrary_t library, const char* name) {
  return guardRuntime(__func__, [&] {
    return moduleGlobal(asModule(library), name, reinterpret_cast<CUdeviceptr*>(dptr), bytes);
  });
}

// A library is loaded on one device here (the current one at cudaLibraryLoadData), and its
// kernels only ever run there: a setting for another device has nothing to apply to, and is
// accepted as the driver accepts it for a device the kernel never runs on. A kernel of the
// program's own (cudaGetKernel) is resolved on `device` itself.
TALLY_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, cudaFuncAttribute attr, int value,
                                                      int device) {
  return guardRuntime(__func__, [&] {
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    if (static_cast<int>(attr) < 0 || attr >= cudaFuncAttributeMax) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = rt().runtimeFunction(kernel, static_cast<uint32_t>(device), f); r != CUDA_SUCCESS) return r;
    if (f->module->device != static_cast<uint32_t>(device)) return CUDA_SUCCESS;
    return setFunctionAttribute(f, attr, value);
  });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  return guardDriver(__func__, [&] { return loadModule(reinterpret_cast<ModuleHandle**>(module), image); });
}

TALLY_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, CUjit_option*, void**) {
  return guardDriver(__func__, [&] { return loadModule(reinterpret_cast<ModuleHandle**>(module), image); });
}

TALLY_API CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  return guardDriver(__func__, [&] { return loadModule(reinterpret_cast<ModuleHandle**>(module), image); });
}

// TMA descriptors (Triton on Hopper): encoded by tallyd's driver for the tenant's memory; the
// 128 opaque bytes are the application's to pass to its kernels.
TALLY_API CUresult cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType dataType, cuuint32_t rank,
                                          void* globalAddress, const cuuint64_t* globalDim,
                                          const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                          const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                          CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                          CUtensorMapFloatOOBfill oobFill) {
  return guardDriver(__func__, [&]() -> CUresult {
    if (tensorMap == nullptr || rank == 0 || rank > 5 || globalDim == nullptr || boxDim == nullptr ||
        elementStrides == nullptr || (rank > 1 && globalStrides == nullptr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    ReplyMessage reply;
    CUresult r = rt().call([&](wire::Call::Builder c) {
      auto m = c.initTensorMapEncodeTiled();
      m.setDevice(currentDevice());
      m.setDataType(dataType);
      m.setRank(rank);
      m.setGlobalAddress(reinterpret_cast<uintptr_t>(globalAddress));
      auto dims = m.initGlobalDim(rank);
      auto strides = m.initGlobalStrides(rank - 1);
      auto box = m.initBoxDim(rank);
      auto element = m.initElementStrides(rank);
      for (cuuint32_t i = 0; i < rank; ++i) {
        dims.set(i, globalDim[i]);
        box.set(i, boxDim[i]);
        element.set(i, elementStrides[i]);
        if (i + 1 < rank) strides.set(i, globalStrides[i]);
      }
      m.setInterleave(interleave);
      m.setSwizzle(swizzle);
      m.setL2Promotion(l2Promotion);
      m.setOobFill(oobFill);
    }, &reply);
    if (r != CUDA_SUCCESS) return r;
    if (!reply.reply().isTensorMap() || reply.reply().getTensorMap().size() != sizeof(CUtensorMap)) {
      return CUDA_ERROR_UNKNOWN;
    }
    std::memcpy(tensorMap, reply.reply().getTensorMap().begin(), sizeof(CUtensorMap));
    return CUDA_SUCCESS;
  });
}

// A preference the driver may ignore (as cudaFuncSetCacheConfig here): checked, not forwarded.
TALLY_API CUresult cuFuncSetCacheConfig(CUfunction function, CUfunc_cache) {
  return asFunction(function) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

TALLY_API CUresult cuModuleLoad(CUmodule* module, const char* fname) {
  return guardDriver(__func__, [&] { return loadModuleFile(reinterpret_cast<ModuleHandle**>(module), fname); });
}

TALLY_API CUresult cuModuleUnload(CUmodule module) {
  return guardDriver(__func__, [&] {
    ModuleHandle* m = asModule(module);
    return m == nullptr ? CUDA_ERROR_INVALID_HANDLE : rt().unloadModule(m);
  });
}

TALLY_API CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  return guardDriver(__func__, [&] {
    return getFunction(reinterpret_cast<FunctionHandle**>(function), asModule(module), name);
  });
}

TALLY_API CUresult cuModuleGetGlobal(CUdeviceptr* ptr, size_t* bytes, CUmodule module, const char* name) {
  return guardDriver(__func__, [&] { return moduleGlobal(asModule(module), name, ptr, bytes); });
}

TALLY_API CUresult cuModuleGetFunctionCount(unsigned int* count, CUmodule mod) {
  return guardDriver(__func__, [&] { return functionCount(count, asModule(mod)); });
}

TALLY_API CUresult cuModuleEnumerateFunctions(CUfunction* functions, unsigned int numFunctions, CUmodule mod) {
  return guardDriver(__func__, [&] {
    return enumerateFunctions(reinterpret_cast<FunctionHandle**>(functions), numFunctions, asModule(mod));
  });
}

TALLY_API CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FunctionHandle* f = asFunction(hfunc);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *hmod = reinterpret_cast<CUmodule>(f->module);
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  return functionName(asFunction(hfunc), hfunc, name);
}

TALLY_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                     CUlibraryOption*, void**, unsigned int) {
  return guardDriver(__func__, [&] {
    auto** out = reinterpret_cast<ModuleHandle**>(library);
    return loadLibrary(out, [&] { return loadModule(out, code); });
  });
}

TALLY_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option*, void**, unsigned int,
                                         CUlibraryOption*, void**, unsigned int) {
  return guardDriver(__func__, [&] {
    auto** out = reinterpret_cast<ModuleHandle**>(library);
    return loadLibrary(out, [&] { return loadModuleFile(out, fileName); });
  });
}

TALLY_API CUresult cuLibraryUnload(CUlibrary library) { return cuModuleUnload(reinterpret_cast<CUmodule>(library)); }

TALLY_API CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (asModule(library) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *module = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return guardDriver(__func__, [&] { return moduleGlobal(asModule(library), name, dptr, bytes); });
}

TALLY_API CUresult cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  return guardDriver(__func__, [&] { return functionCount(count, asModule(lib)); });
}

TALLY_API CUresult cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int numKernels, CUlibrary lib) {
  return guardDriver(__func__, [&] {
    return enumerateFunctions(reinterpret_cast<FunctionHandle**>(kernels), numKernels, asModule(lib));
  });
}

// cuLibraryGetManaged and cuLibraryGetUnifiedFunction (and their runtime versions) stay
// NotSupported: a library's __managed__ variables would have to live in memory that the
// application and tallyd's GPU share at one address, which tallyd only arranges for
// cudaMallocManaged, not for the managed section of a loaded image; a unified function pointer is
// a host-callable address in the process that loaded the library, i.e. tallyd's.

TALLY_API CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  return guardDriver(__func__, [&] {
    return getFunction(reinterpret_cast<FunctionHandle**>(kernel), asModule(library), name);
  });
}

// A CUkernel of ours is (or resolves to) a function of the current (only) context.
TALLY_API CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  return guardDriver(__func__, [&] {
    if (function == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = kernelFunction(kernel, f); r != CUDA_SUCCESS) return r;
    *function = reinterpret_cast<CUfunction>(f);
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuKernelGetName(const char** name, CUkernel hfunc) {
  return guardDriver(__func__, [&] {
    if (name == nullptr || hfunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = kernelFunction(hfunc, f); r != CUDA_SUCCESS) return r;
    return functionName(f, hfunc, name);
  });
}

TALLY_API CUresult cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  return guardDriver(__func__, [&] {
    if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
    FunctionHandle* f = nullptr;
    if (CUresult r = kernelFunction(kernel, f); r != CUDA_SUCCESS) return r;
    *pLib = reinterpret_cast<CUlibrary>(f->module);
    return CUDA_SUCCESS;
  });
}

// A preference, as cuFuncSetCacheConfig: the kernel and the device are checked, nothing is sent.
TALLY_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  return guardDriver(__func__, [&] {
    if (static_cast<int>(config) < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult r = validDevice(dev); r != CUDA_SUCCESS) return r;
    FunctionHandle* f = nullptr;
    return kernelFunction(kernel, f);
  });
}

TALLY_API CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  return guardDriver(__func__, [&] { return functionAttribute(asFunction(function), attribute, value); });
}

TALLY_API CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attribute, CUkernel kernel, CUdevice) {
  return guardDriver(__func__, [&] {
    FunctionHandle* f = nullptr;
    if (CUresult r = kernelFunction(kernel, f); r != CUDA_SUCCESS) return r;
    return functionAttribute(f, attribute, value);
  });
}

TALLY_API CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  return guardDriver(__func__, [&] { return setFunctionAttribute(asFunction(function), attribute, value); });
}

TALLY_API CUresult cuKernelSetAttribute(CUfunction_attribute attribute, int value, CUkernel kernel, CUdevice) {
  return guardDriver(__func__, [&] {
    FunctionHandle* f = nullptr;
    if (CUresult r = kernelFunction(kernel, f); r != CUDA_SUCCESS) return r;
    return setFunctionAttribute(f, attribute, value);
  });
}

TALLY_API CUresult cuFuncGetParamInfo(CUfunction function, size_t index, size_t* offset, size_t* size) {
  FunctionHandle* f = asFunction(function);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= f->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = f->params[index].first;
  if (size != nullptr) *size = f->params[index].second;
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  return guardDriver(__func__, [&] {
    FunctionHandle* f = nullptr;
    if (CUresult r = kernelFunction(kernel, f); r != CUDA_SUCCESS) return r;
    return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(f), index, offset, size);
  });
}

TALLY_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction function,
                                                                        int blockSize, size_t dynamicSmem,
                                                                        unsigned int flags) {
  return guardDriver(__func__, [&] { return occupancy(asFunction(function), blocks, blockSize, dynamicSmem, flags); });
}

TALLY_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function, int blockSize,
                                                               size_t dynamicSmem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, function, blockSize, dynamicSmem, 0);
}

TALLY_API CUresult cuOccupancyMaxActiveClusters(int* numClusters, CUfunction function, const CUlaunchConfig* config) {
  return guardDriver(__func__, [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return clusterOccupancy(asFunction(function), numClusters, clustersOf(*config, false), config->sharedMemBytes);
  });
}

TALLY_API CUresult cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction function, const CUlaunchConfig* config) {
  return guardDriver(__func__, [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return clusterOccupancy(asFunction(function), clusterSize, clustersOf(*config, true), config->sharedMemBytes);
  });
}

TALLY_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction function, int numBlocks,
                                                           int blockSize) {
  return guardDriver(__func__, [&] { return availableDynamicSmem(asFunction(function), bytes, numBlocks, blockSize); });
}
