// Modules, kernels and variables. Registration at load time only records pointers (import
// torch registers 21k functions); modules reach tallyd when one of their kernels is first
// used, by content hash, so the bytes cross the wire once per server.
#include "client/api/api_util.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

CUresult runtimeFunction(const void* func, FunctionHandle*& out) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  KernelRecord* k = rt().kernelFor(func);
  if (k == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // what CUDA 13 returns for a non-kernel
  return rt().functionOf(k, currentDevice(), out);
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

CUresult occupancy(FunctionHandle* f, int* blocks, int blockSize, size_t dynamicSmem, unsigned flags) {
  if (f == nullptr || blocks == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t value = 0;
  CUresult r = rt().queryOccupancy(*f, {blockSize, dynamicSmem, flags, false, 0}, value);
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

CUresult getFunction(FunctionHandle** out, ModuleHandle* module, const char* name) {
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return rt().functionOf(module, name, *out);
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
    uint64_t value = 0;
    CUresult r = rt().queryOccupancy(*f, {blockSize, 0, 0, true, numBlocks}, value);
    if (r == CUDA_SUCCESS) *bytes = value;
    return r;
  });
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
  return guardDriver(__func__, [&] {
    ModuleHandle* m = asModule(module);
    if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ReplyMessage reply;
    CUresult r = rt().call([&](wire::Call::Builder c) {
      auto g = c.initModuleGetGlobal();
      g.setModule(m->id);
      g.setName(name);
    }, &reply);
    if (r != CUDA_SUCCESS) return r;
    auto global = reply.reply().getGlobal();
    rt().addDeviceRegion(global.getPtr(), global.getSize(), m->device);
    if (ptr != nullptr) *ptr = global.getPtr();
    if (bytes != nullptr) *bytes = global.getSize();
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**, unsigned int,
                                     CUlibraryOption*, void**, unsigned int) {
  return guardDriver(__func__, [&] { return loadModule(reinterpret_cast<ModuleHandle**>(library), code); });
}

TALLY_API CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option*, void**, unsigned int,
                                         CUlibraryOption*, void**, unsigned int) {
  return guardDriver(__func__, [&] { return loadModuleFile(reinterpret_cast<ModuleHandle**>(library), fileName); });
}

TALLY_API CUresult cuLibraryUnload(CUlibrary library) { return cuModuleUnload(reinterpret_cast<CUmodule>(library)); }

TALLY_API CUresult cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  if (module == nullptr || asModule(library) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *module = reinterpret_cast<CUmodule>(library);
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  return guardDriver(__func__, [&] {
    return getFunction(reinterpret_cast<FunctionHandle**>(kernel), asModule(library), name);
  });
}

// A CUkernel of ours is already a function of the current (only) context.
TALLY_API CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  if (function == nullptr || asFunction(kernel) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *function = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}

TALLY_API CUresult cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  return guardDriver(__func__, [&] { return functionAttribute(asFunction(function), attribute, value); });
}

TALLY_API CUresult cuKernelGetAttribute(int* value, CUfunction_attribute attribute, CUkernel kernel, CUdevice) {
  return guardDriver(__func__, [&] { return functionAttribute(asFunction(kernel), attribute, value); });
}

TALLY_API CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  return guardDriver(__func__, [&] { return setFunctionAttribute(asFunction(function), attribute, value); });
}

TALLY_API CUresult cuKernelSetAttribute(CUfunction_attribute attribute, int value, CUkernel kernel, CUdevice) {
  return guardDriver(__func__, [&] { return setFunctionAttribute(asFunction(kernel), attribute, value); });
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
  return cuFuncGetParamInfo(reinterpret_cast<CUfunction>(kernel), index, offset, size);
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
