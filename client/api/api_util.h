// Shared by the per-family entry files: the C ABI boundary (no exception crosses it) and
// the small conversions every family needs.
#pragma once

#include "client/runtime/client_runtime.h"
#include "common/trace/call_trace.h"

#include <spdlog/spdlog.h>

#include <exception>

namespace tally::client {

// Runs `body` (returning CUresult); an exception becomes `onException` and is logged, since
// unwinding into the application's C code would abort it.
template <typename Body>
CUresult guardDriver(const char* api, Body&& body) {
  trace::ApplicationCallScope traced;
  try {
    CUresult r = body();
    // TALLY_LOG_LEVEL=debug: which call a framework's unexplained error came from.
    if (r != CUDA_SUCCESS) spdlog::debug("tally: {} returned {}", api, static_cast<int>(r));
    return r;
  } catch (const std::exception& e) {
    spdlog::error("tally: {} failed: {}", api, e.what());
  } catch (...) {
    spdlog::error("tally: {} failed with an unknown exception", api);
  }
  return CUDA_ERROR_UNKNOWN;
}

template <typename Body>
cudaError_t guardRuntime(const char* api, Body&& body) {
  return finish(guardDriver(api, std::forward<Body>(body)));
}

inline uint32_t currentDevice() { return static_cast<uint32_t>(threadState().device); }

// device.cc: CUDA_ERROR_INVALID_DEVICE unless `ordinal` names one of the tenant's GPUs (or the
// connection's error); a device-wide sync of the current device, for this tenant's work only.
CUresult validDevice(int ordinal);
CUresult synchronizeDevice();
CUresult synchronizeDevice(uint32_t device);
// cudaDeviceReset / cuDevicePrimaryCtxReset of `device` (client/api/device.cc).
CUresult resetDevice(uint32_t device);

// host_register.cc: cudaHostGetDevicePointer of registered memory (region `region` at `key`):
// tallyd's device address of `host` when the pages are shared with it, else NotSupported.
CUresult registeredDevicePointer(uintptr_t key, const HostRegion& region, const void* host, void** device);

// For the _ptsz exports: a null stream is the calling thread's default stream.
inline CUstream perThreadDefault(CUstream stream) { return stream == nullptr ? CU_STREAM_PER_THREAD : stream; }

// stream_event.cc: the priority `stream` was created with (0 for the default streams), or
// CUDA_ERROR_INVALID_HANDLE. stream_attributes.cc: forgets a destroyed stream's attributes.
CUresult streamPriority(CUstream stream, int& priority);
void forgetStreamAttributes(uint64_t stream);

// Fills a wire Dim3 from x/y/z.
template <typename Builder>
void setDim3(Builder b, unsigned x, unsigned y, unsigned z) {
  b.setX(x);
  b.setY(y);
  b.setZ(z);
}

}  // namespace tally::client

#define TALLY_API extern "C" __attribute__((visibility("default")))

// Entry files live at global scope (C symbols); give them the wire namespace by its short name.
namespace wire = tally::wire;
