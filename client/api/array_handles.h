// What the array family (array.cc: arrays and the copies to, from and between them) shares with
// texture.cc (texture and surface objects) and memory.cc (cuMemcpy2D with an array side).
#pragma once

#include "client/api/api_util.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace tally::client {

// A CUDA array (cudaArray_t / CUarray): tallyd holds it under `id`; its descriptor is kept here,
// so that descriptor and channel queries need no round trip.
struct ArrayHandle {
  HandleMagic magic = HandleMagic::kArray;
  uint64_t id = 0;
  uint32_t device = 0;
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  bool level = false;  // a level of a mipmapped array: owned by it, never freed alone
};

// A mipmapped array: tallyd holds it under `id`; the arrays of its levels are made on first ask
// (cudaGetMipmappedArrayLevel) and go with it.
struct MipmappedHandle {
  HandleMagic magic = HandleMagic::kMipmappedArray;
  uint64_t id = 0;
  uint32_t device = 0;
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};  // of level 0
  unsigned levels = 0;
  std::mutex mutex;
  std::vector<ArrayHandle*> levelArrays;  // owned; index = level, nullptr until asked for
};

// The application's array handle if it is one of ours (live), else nullptr.
inline ArrayHandle* asArray(const void* handle) { return checkedHandle<ArrayHandle>(handle, HandleMagic::kArray); }
inline MipmappedHandle* asMipmapped(const void* handle) {
  return checkedHandle<MipmappedHandle>(handle, HandleMagic::kMipmappedArray);
}

// Bytes of one element (all channels) of an array of `format`; 0 for a format not forwarded.
size_t arrayElementBytes(CUarray_format format, unsigned channels);

// A runtime channel descriptor as the driver's format and channel count: false when it names no
// format tallyd forwards (cudaErrorInvalidChannelDescriptor natively for malformed ones).
bool formatOfChannelDesc(const cudaChannelFormatDesc& desc, CUarray_format& format, unsigned& channels);
cudaChannelFormatDesc channelDescOf(CUarray_format format, unsigned channels);

// A copy in the driver's terms (CUDA_MEMCPY3D; srcArray/dstArray are the application's handles,
// CU_MEMORYTYPE_UNIFIED sides are told apart by the client's device regions), forwarded to
// tallyd: host sides as bulk bytes or through shared host memory, the others as they are.
CUresult copy3D(const CUDA_MEMCPY3D& p, CUstream stream, bool sync);
// cuMemcpy2D[Async|Unaligned] with an array side (memory.cc hands those here).
CUresult copy2DWithArray(const CUDA_MEMCPY2D& p, CUstream stream, bool sync);

}  // namespace tally::client
