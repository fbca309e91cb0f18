// Run-time binding of tallyd to the CUDA driver (libcuda.so.1).
//
// tallyd does not link libcuda: a host without the NVIDIA driver would then
// refuse to start it ("libcuda.so.1: cannot open shared object file").
// Instead it links tally_server_driver_shim (schema/codegen/CMakeLists.txt):
// the generated ${CMAKE_BINARY_DIR}/gen/server/server_driver_shim.cc defines
// every CUresult function cuda.h declares (cuInit, cuMemAlloc_v2,
// cuLaunchKernel_ptsz, ...) as a forwarder to the export of the same name,
// found through driverSymbol() below.  Without the driver, the shim's cuInit
// returns CUDA_ERROR_NO_DEVICE and every other driver function
// CUDA_ERROR_NOT_INITIALIZED; driverLoaded() says why.
#pragma once

#include <span>
#include <string>

namespace tally::server::gpu {

// Address of the libcuda export `name` (exact exported name, e.g.
// "cuMemAlloc_v2", "cuLaunchKernel_ptsz"), or nullptr when the driver library
// cannot be loaded or does not export `name`.  The first call (from any
// thread) dlopen()s "libcuda.so.1" with RTLD_NOW | RTLD_LOCAL, exactly once;
// the library is never closed.  Thread-safe.
void* driverSymbol(const char* name);

// Loads the driver library if that was not attempted yet.  True when it is
// loaded; otherwise false, and *error (when non-null) receives the dlerror()
// text, e.g. "libcuda.so.1: cannot open shared object file: No such file or
// directory".  Thread-safe.
bool driverLoaded(std::string* error);

// Introspection of the generated shim (defined in server_driver_shim.cc), for
// tests: every function it defines, by exported name, sorted by name.
struct ShimmedDriverFunction {
  const char* name;
  void* fn;  // the shim's definition
};
std::span<const ShimmedDriverFunction> shimmedDriverFunctions();

}  // namespace tally::server::gpu
