// Reporting for CUDA APIs the Tally client does not implement, and CUDA
// error-code names.
//
// reportNotSupported is called by the generated weak stubs
// (schema/codegen/gen_cuda_stubs.py) and may be called by hand-written code.
// driverErrorName/runtimeErrorName are implemented in the generated
// error_names.cc (from cuda.h's CUresult and driver_types.h's cudaError enums).
#pragma once

#include <string_view>

namespace tally::client {

// Logs, once per API name for the life of the process, the warning
//   "tally: <apiName> is not supported by the Tally client; returning NotSupported"
// via spdlog::warn.  Thread-safe; never throws and never aborts.
void reportNotSupported(const char* apiName) noexcept;

// True if reportNotSupported has been called with this name (diagnostics/tests).
bool wasReportedNotSupported(std::string_view apiName) noexcept;

// "CUDA_ERROR_INVALID_VALUE" for 1, ...; nullptr for a code not in CUresult.
const char* driverErrorName(int code);
// "cudaErrorInvalidValue" for 1, ...; nullptr for a code not in cudaError_t.
const char* runtimeErrorName(int code);

}  // namespace tally::client
