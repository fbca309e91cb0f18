// How applications find driver functions without linking libcuda: cuGetProcAddress and the
// runtime's cudaGetDriverEntryPoint* resolve to this library's own hand-written driver functions,
// through the generated table. A function that is only a generated NotSupported stub is reported
// not found, as a driver without it would: feature probes then take their fallback instead of
// failing at the first call (client/entry/driver_proc.h says how a stub is recognised).
#include "client/api/api_util.h"
#include "client/entry/driver_proc.h"

using namespace tally::client;

namespace {

CUresult lookup(const char* symbol, void** out, int version, bool perThread, CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DriverProc* proc = findDriverProc(symbol, version, perThread);
  if (proc != nullptr && !proc->implemented()) proc = nullptr;
  // What a runtime probed and did not get is the first thing to know when it refuses to start.
  if (proc == nullptr) spdlog::debug("tally: driver entry point {} (CUDA {}) not found", symbol, version);
  *out = proc != nullptr ? proc->fn : nullptr;
  if (status != nullptr) *status = proc != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return proc != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // namespace

TALLY_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                    CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, cudaVersion, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, status);
}

TALLY_API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                              cudaDriverEntryPointQueryResult* status) {
  // Natively a symbol that is not found is reported through `status`, not the return value.
  lookup(symbol, funcPtr, CUDART_VERSION, (flags & cudaEnablePerThreadDefaultStream) != 0,
         reinterpret_cast<CUdriverProcAddressQueryResult*>(status));
  return cudaSuccess;
}

TALLY_API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                       unsigned long long flags,
                                                       cudaDriverEntryPointQueryResult* status) {
  lookup(symbol, funcPtr, static_cast<int>(cudaVersion), (flags & cudaEnablePerThreadDefaultStream) != 0,
         reinterpret_cast<CUdriverProcAddressQueryResult*>(status));
  return cudaSuccess;
}

// --- the export older headers bind to (cuda.h renames cuGetProcAddress to its _v2) ----------
#undef cuGetProcAddress
// CUDA 11.3–11.8: no out-parameter for why a symbol was not found.
TALLY_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  return lookup(symbol, pfn, cudaVersion, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0, nullptr);
}
