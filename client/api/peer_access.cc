// Peer device memory access family: which of the tenant's devices reach each other's memory
// (answered from the P2P attributes tallyd sends in its Welcome, in the tenant's device
// numbering) and the per-process record of which accesses the application enabled.
#include "client/api/peer_access.h"

#include "client/api/api_util.h"

#include <mutex>
#include <set>
#include <utility>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

bool isTenantDevice(int d) { return d >= 0 && d < rt().deviceCount(); }

std::mutex& enabledMutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<std::pair<int, int>>& enabled() {
  static auto* pairs = new std::set<std::pair<int, int>>();  // used by threads still running at exit
  return *pairs;
}

CUresult canAccessPeer(int* can, int device, int peer) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!isTenantDevice(device) || !isTenantDevice(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can = device != peer && rt().device(device).p2pAttribute(static_cast<size_t>(peer), CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED);
  return CUDA_SUCCESS;
}

CUresult p2pAttribute(int* value, int attribute, int src, int dst) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (value == nullptr || attribute < CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ||
      attribute > CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!isTenantDevice(src) || !isTenantDevice(dst) || src == dst) return CUDA_ERROR_INVALID_DEVICE;
  *value = rt().device(src).p2pAttribute(static_cast<size_t>(dst), attribute);
  return CUDA_SUCCESS;
}

}  // namespace

namespace tally::client {

CUresult enablePeerAccess(int device, int peer, unsigned flags) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!isTenantDevice(device) || !isTenantDevice(peer) || device == peer) return CUDA_ERROR_INVALID_DEVICE;
  if (!rt().device(device).p2pAttribute(static_cast<size_t>(peer), CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED)) {
    return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  }
  std::lock_guard lock(enabledMutex());
  return enabled().insert({device, peer}).second ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

CUresult disablePeerAccess(int device, int peer) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (!isTenantDevice(device) || !isTenantDevice(peer)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(enabledMutex());
  return enabled().erase({device, peer}) == 1 ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

}  // namespace tally::client

TALLY_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  return guardRuntime(__func__, [&] { return canAccessPeer(can, device, peer); });
}

TALLY_API cudaError_t cudaDeviceGetP2PAttribute(int* value, cudaDeviceP2PAttr attribute, int src, int dst) {
  return guardRuntime(__func__, [&] { return p2pAttribute(value, static_cast<int>(attribute), src, dst); });
}

TALLY_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  return guardRuntime(__func__, [&] { return enablePeerAccess(static_cast<int>(currentDevice()), peer, flags); });
}

TALLY_API cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  return guardRuntime(__func__, [&] { return disablePeerAccess(static_cast<int>(currentDevice()), peer); });
}

TALLY_API CUresult cuDeviceCanAccessPeer(int* can, CUdevice device, CUdevice peer) {
  return guardDriver(__func__, [&] { return canAccessPeer(can, device, peer); });
}

TALLY_API CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attribute, CUdevice src, CUdevice dst) {
  return guardDriver(__func__, [&] { return p2pAttribute(value, static_cast<int>(attribute), src, dst); });
}
