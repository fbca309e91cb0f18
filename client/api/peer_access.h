// Peer access between the tenant's devices (peer_access.cc), shared with the driver-API contexts
// (context.cc): tallyd's contexts already reach each other's memory wherever the hardware allows
// (server/gpu/gpu.cc), so enabling access is the client's bookkeeping, with the native answers.
#pragma once

#include <cuda.h>

namespace tally::client {

// cudaDeviceEnablePeerAccess / cuCtxEnablePeerAccess from `device` to `peer`: INVALID_DEVICE for
// a device number out of range or the device itself, PEER_ACCESS_UNSUPPORTED where the hardware
// has no path, PEER_ACCESS_ALREADY_ENABLED the second time.
CUresult enablePeerAccess(int device, int peer, unsigned flags);
// PEER_ACCESS_NOT_ENABLED unless enabled before.
CUresult disablePeerAccess(int device, int peer);

}  // namespace tally::client
