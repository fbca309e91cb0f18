// Device family: answered locally from the handshake where possible (torch calls
// cudaGetDevice and friends millions of times); device-wide work is narrowed by tallyd to
// this tenant.
#include "client/api/api_util.h"
#include "client/runtime/capture_table.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <tuple>

using namespace tally::client;

namespace tally::client {

CUresult validDevice(int ordinal) {
  if (CUresult r = ClientRuntime::get().ready(); r != CUDA_SUCCESS) return r;
  return ordinal >= 0 && ordinal < ClientRuntime::get().deviceCount() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// A device-wide sync while one of this process's captures is open on the device is refused in
// every capture mode (and the capture invalidated), as natively.
CUresult synchronizeDevice() { return synchronizeDevice(currentDevice()); }

CUresult synchronizeDevice(uint32_t device) {
  if (CUresult r = captureTable().checkDeviceSync(device); r != CUDA_SUCCESS) return r;
  return ClientRuntime::get().sync([device](wire::Call::Builder c) { c.initDeviceSynchronize().setDevice(device); });
}

// Natively a reset destroys all of the process's state on the device. Here the device's work is
// finished and the application's allocations on it are freed, so a program that resets to give
// memory back (between phases, between test cases) gets its quota back in tallyd. Streams,
// events, modules and graphs stay until the application exits: their handles are invalid after
// a reset, so no correct program can tell; kernels stay launchable, as the runtime reloads
// modules after a native reset.
CUresult resetDevice(uint32_t device) {
  if (CUresult r = synchronizeDevice(device); r != CUDA_SUCCESS) return r;
  CUresult first = CUDA_SUCCESS;
  for (const auto& [base, region] : ClientRuntime::get().allocationsOn(device)) {
    CUresult r = region.streamOrdered ? cuMemFreeAsync(base, CU_STREAM_LEGACY) : cuMemFree_v2(base);
    if (first == CUDA_SUCCESS) first = r;
  }
  CUresult synced = synchronizeDevice(device);  // the stream-ordered frees are done
  return first != CUDA_SUCCESS ? first : synced;
}

}  // namespace tally::client

namespace {

CUresult setLimit(int limit, size_t value) {
  return ClientRuntime::get().call([&](wire::Call::Builder c) {
    auto l = c.initSetLimit();
    l.setDevice(currentDevice());
    l.setLimit(static_cast<uint32_t>(limit));
    l.setValue(value);
  });
}

CUresult getLimit(int limit, size_t* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReplyMessage reply;
  CUresult r = ClientRuntime::get().call([&](wire::Call::Builder c) {
    auto l = c.initGetLimit();
    l.setDevice(currentDevice());
    l.setLimit(static_cast<uint32_t>(limit));
  }, &reply);
  if (r == CUDA_SUCCESS) *value = reply.reply().getValue();
  return r;
}

CUresult memGetInfo(size_t* free, size_t* total) {
  ReplyMessage reply;
  CUresult r = ClientRuntime::get().call([](wire::Call::Builder c) { c.initMemGetInfo().setDevice(currentDevice()); }, &reply);
  if (r != CUDA_SUCCESS) return r;
  if (free != nullptr) *free = reply.reply().getMemInfo().getFree();
  if (total != nullptr) *total = reply.reply().getMemInfo().getTotal();
  return CUDA_SUCCESS;
}

CUresult streamPriorityRange(int* least, int* greatest) {
  if (CUresult r = ClientRuntime::get().ready(); r != CUDA_SUCCESS) return r;
  const DeviceView& d = ClientRuntime::get().device(threadState().device);
  if (least != nullptr) *least = d.streamPriorityLeast;
  if (greatest != nullptr) *greatest = d.streamPriorityGreatest;
  return CUDA_SUCCESS;
}

}  // namespace

// --- runtime ---------------------------------------------------------------------------------

TALLY_API cudaError_t cudaGetDeviceCount(int* count) {
  return guardRuntime(__func__, [&] {
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // Natively the count is left as it was when the runtime cannot start.
    if (CUresult r = ClientRuntime::get().ready(); r != CUDA_SUCCESS) return r;
    *count = ClientRuntime::get().deviceCount();
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return finishRuntime(cudaErrorInvalidValue);
  *device = threadState().device;
  return cudaSuccess;
}

TALLY_API cudaError_t cudaSetDevice(int device) {
  return guardRuntime(__func__, [&] {
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    threadState().device = device;
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) { return cudaSetDevice(device); }
namespace {
// The scheduling flags the application chose (cudaSetDeviceFlags); they decide how a thread
// waiting for tallyd's reply waits, as they decide how the driver waits for the GPU natively.
std::atomic<unsigned> deviceFlags{cudaDeviceScheduleAuto | cudaDeviceMapHost};
constexpr unsigned kKnownDeviceFlags = cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax;
}  // namespace

TALLY_API cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  if ((flags & ~kKnownDeviceFlags) != 0) return finishRuntime(cudaErrorInvalidValue);
  unsigned schedule = flags & cudaDeviceScheduleMask;
  if (schedule != cudaDeviceScheduleAuto && schedule != cudaDeviceScheduleSpin && schedule != cudaDeviceScheduleYield &&
      schedule != cudaDeviceScheduleBlockingSync) {
    return finishRuntime(cudaErrorInvalidValue);
  }
  ClientRuntime& rt = ClientRuntime::get();
  if (CUresult r = rt.ready(); r != CUDA_SUCCESS) return finish(r);
  deviceFlags.store(flags | cudaDeviceMapHost);
  rt.connection().setBlockingWaits(schedule == cudaDeviceScheduleBlockingSync);
  return cudaSuccess;
}

TALLY_API cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return finishRuntime(cudaErrorInvalidValue);
  *flags = deviceFlags.load();
  return cudaSuccess;
}

TALLY_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  return guardRuntime(__func__, [&] {
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    *prop = ClientRuntime::get().device(device).properties;
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  return guardRuntime(__func__, [&] {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    const DeviceView& d = ClientRuntime::get().device(device);
    if (attr <= 0 || static_cast<size_t>(attr) >= d.attributes.size()) return CUDA_ERROR_INVALID_VALUE;
    *value = d.attribute(attr);
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return guardRuntime(__func__, [&] { return streamPriorityRange(least, greatest); });
}

TALLY_API cudaError_t cudaDeviceSynchronize() { return guardRuntime(__func__, [] { return synchronizeDevice(); }); }

// A shared context cannot be reset for one tenant: wait for its work, keep its objects.
TALLY_API cudaError_t cudaDeviceReset() { return guardRuntime(__func__, [] { return resetDevice(currentDevice()); }); }

TALLY_API cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  return guardRuntime(__func__, [&] { return setLimit(limit, value); });
}
TALLY_API cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  return guardRuntime(__func__, [&] { return getLimit(limit, value); });
}

TALLY_API cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  return guardRuntime(__func__, [&] { return memGetInfo(free, total); });
}

TALLY_API cudaError_t cudaDriverGetVersion(int* version) {
  return guardRuntime(__func__, [&] {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = ClientRuntime::get().ready();
    *version = r == CUDA_SUCCESS ? ClientRuntime::get().driverVersion() : 0;
    return CUDA_SUCCESS;  // natively 0 without a driver, not an error
  });
}

TALLY_API cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return finishRuntime(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

TALLY_API cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  return guardRuntime(__func__, [&] {
    if (id == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    const DeviceView& d = ClientRuntime::get().device(device);
    std::snprintf(id, static_cast<size_t>(len), "%08x:%02x:%02x.0", d.attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
                  d.attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID), d.attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID));
    return CUDA_SUCCESS;
  });
}

namespace {

// "domain:bus:device[.function]" (hexadecimal, domain optional), as cudaDeviceGetPCIBusId
// writes it; the device whose PCI location that is, or -1.
int deviceAtPciBusId(const char* id) {
  if (id == nullptr) return -1;
  unsigned domain = 0, bus = 0, device = 0;
  if (std::sscanf(id, "%x:%x:%x", &domain, &bus, &device) != 3) {
    domain = 0;
    if (std::sscanf(id, "%x:%x", &bus, &device) != 2) return -1;
  }
  for (int d = 0; d < ClientRuntime::get().deviceCount(); ++d) {
    const DeviceView& v = ClientRuntime::get().device(d);
    if (static_cast<unsigned>(v.attribute(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)) == domain &&
        static_cast<unsigned>(v.attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)) == bus &&
        static_cast<unsigned>(v.attribute(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)) == device) {
      return d;
    }
  }
  return -1;
}

CUresult deviceByPciBusId(int* device, const char* id) {
  if (device == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ClientRuntime::get().ready(); r != CUDA_SUCCESS) return r;
  int d = deviceAtPciBusId(id);
  if (d < 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = d;
  return CUDA_SUCCESS;
}

// The L1/shared-memory split preferred for the current device: kept and read back, not applied
// (tallyd's context is shared; the driver treats it as a hint anyway).
std::atomic<int> gCachePreference[kMaxDevices] = {};

}  // namespace

TALLY_API cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  return guardRuntime(__func__, [&] { return deviceByPciBusId(device, pciBusId); });
}

TALLY_API cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache config) {
  return guardRuntime(__func__, [&] {
    if (config < cudaFuncCachePreferNone || config > cudaFuncCachePreferEqual) return CUDA_ERROR_INVALID_VALUE;
    gCachePreference[threadState().device] = config;
    return ClientRuntime::get().ready();
  });
}

TALLY_API cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* config) {
  return guardRuntime(__func__, [&] {
    if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *config = static_cast<cudaFuncCache>(gCachePreference[threadState().device].load());
    return ClientRuntime::get().ready();
  });
}

// Deprecated (bank size is fixed since Volta): natively accepted and answered with 4 bytes.
TALLY_API cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig config) {
  if (config < cudaSharedMemBankSizeDefault || config > cudaSharedMemBankSizeEightByte) {
    return finishRuntime(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

TALLY_API cudaError_t cudaDeviceGetSharedMemConfig(cudaSharedMemConfig* config) {
  if (config == nullptr) return finishRuntime(cudaErrorInvalidValue);
  *config = cudaSharedMemBankSizeFourByte;
  return cudaSuccess;
}

// The device whose compute capability is closest to the one asked for (the first on a tie).
TALLY_API cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  return guardRuntime(__func__, [&] {
    if (device == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = ClientRuntime::get().ready(); r != CUDA_SUCCESS) return r;
    int best = 0, bestDistance = INT32_MAX;
    for (int d = 0; d < ClientRuntime::get().deviceCount(); ++d) {
      const DeviceView& v = ClientRuntime::get().device(d);
      int distance = std::abs((v.major * 10 + v.minor) - (prop->major * 10 + prop->minor));
      if (distance < bestDistance) std::tie(best, bestDistance) = std::tie(d, distance);
    }
    *device = best;
    return CUDA_SUCCESS;
  });
}

// The runtime tries the listed devices in order; each must be one of the tenant's GPUs.
TALLY_API cudaError_t cudaSetValidDevices(int* devices, int count) {
  return guardRuntime(__func__, [&] {
    if (count < 0 || (count > 0 && devices == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < count; ++i) {
      if (CUresult r = validDevice(devices[i]); r != CUDA_SUCCESS) return r;
    }
    return ClientRuntime::get().ready();
  });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuDeviceGetPCIBusId(char* id, int len, CUdevice device) {
  return static_cast<CUresult>(cudaDeviceGetPCIBusId(id, len, device));
}

TALLY_API CUresult cuDeviceGetByPCIBusId(CUdevice* device, const char* pciBusId) {
  return guardDriver(__func__, [&] { return deviceByPciBusId(device, pciBusId); });
}

TALLY_API CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  return static_cast<CUresult>(cudaDeviceSetCacheConfig(static_cast<cudaFuncCache>(config)));
}

TALLY_API CUresult cuCtxGetCacheConfig(CUfunc_cache* config) {
  return static_cast<CUresult>(cudaDeviceGetCacheConfig(reinterpret_cast<cudaFuncCache*>(config)));
}

TALLY_API CUresult cuInit(unsigned int) {
  return guardDriver(__func__, [] { return ClientRuntime::get().ready(); });
}

TALLY_API CUresult cuDriverGetVersion(int* version) {
  return guardDriver(__func__, [&] {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *version = ClientRuntime::get().ready() == CUDA_SUCCESS ? ClientRuntime::get().driverVersion() : CUDA_VERSION;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceGetCount(int* count) {
  return guardDriver(__func__, [&] {
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    if (CUresult r = ClientRuntime::get().ready(); r != CUDA_SUCCESS) return r;
    *count = ClientRuntime::get().deviceCount();
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  return guardDriver(__func__, [&] {
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(ordinal); r != CUDA_SUCCESS) return r;
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceGetName(char* name, int len, CUdevice device) {
  return guardDriver(__func__, [&] {
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    std::snprintf(name, static_cast<size_t>(len), "%s", ClientRuntime::get().device(device).name.c_str());
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attr, CUdevice device) {
  return guardDriver(__func__, [&] {
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    const DeviceView& d = ClientRuntime::get().device(device);
    if (attr <= 0 || static_cast<size_t>(attr) >= d.attributes.size()) return CUDA_ERROR_INVALID_VALUE;
    *value = d.attribute(attr);
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  return guardDriver(__func__, [&] {
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    *bytes = ClientRuntime::get().device(device).totalMem;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) {
  return guardDriver(__func__, [&] {
    if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    *uuid = ClientRuntime::get().device(device).uuid;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice device) {
  return guardDriver(__func__, [&] {
    if (major == nullptr || minor == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validDevice(device); r != CUDA_SUCCESS) return r;
    *major = ClientRuntime::get().device(device).major;
    *minor = ClientRuntime::get().device(device).minor;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  return guardDriver(__func__, [&] { return streamPriorityRange(least, greatest); });
}

TALLY_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  return guardDriver(__func__, [&] { return setLimit(limit, value); });
}
TALLY_API CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  return guardDriver(__func__, [&] { return getLimit(limit, value); });
}
TALLY_API CUresult cuMemGetInfo(size_t* free, size_t* total) {
  return guardDriver(__func__, [&] { return memGetInfo(free, total); });
}

// --- the export older headers bind to (cuda.h renames cuDeviceGetUuid to its _v2) -----------
#undef cuDeviceGetUuid
// The same answer: the tenant never sees MIG instances, where the two generations differ.
TALLY_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice device) { return cuDeviceGetUuid_v2(uuid, device); }
