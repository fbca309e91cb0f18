// The fake driver's CUDA arrays, texture and surface objects, for tallyd's handlers on the fake
// GPU (api/array_api.cc): an array is a malloc'd host buffer of exactly its bytes (rows packed,
// slices packed), so a copy past its end is an AddressSanitizer report; cuMemcpy3DAsync copies
// at once, row by row, between host memory, "device" memory (host memory too, fake_libcuda.cc)
// and arrays, and refuses array regions outside the array as the driver does. Objects are small
// integers from 1, as the driver's are; creating or destroying one reads its array, so an array
// destroyed under a live object is a use-after-free. Mipmapped arrays hold one such array per
// level. tallyFakeLiveArrays(), tallyFakeLiveMipmappedArrays() and tallyFakeLiveObjects() count
// what is not destroyed (a test's check that a tenant's end
// destroys its own).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace {

constexpr uint32_t kArrayMagic = 0xa77a7000;
constexpr size_t kMaxDimension = 65536;  // the fake's texture limits (real GPUs: 2^16..2^17 per dimension)

struct FakeArray {
  uint32_t magic = kArrayMagic;
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  size_t rowBytes = 0, rows = 0, slices = 0;
  char* data = nullptr;
};

constexpr uint32_t kMipmappedMagic = 0xa77a7001;

struct FakeMipmapped {
  uint32_t magic = kMipmappedMagic;
  std::vector<FakeArray*> levels;
};

struct FakeObject {
  FakeArray* array = nullptr;  // nullptr: linear memory or a mipmapped array
  bool surface = false;
  FakeMipmapped* mipmapped = nullptr;
};

std::mutex mutex;
std::map<unsigned long long, FakeObject> objects;
unsigned long long nextObject = 1;
std::atomic<size_t> liveArrays{0};
std::atomic<size_t> mipmappedCount{0};

size_t formatBytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
    default: return 0;
  }
}

FakeMipmapped* liveMipmapped(CUmipmappedArray m) {
  auto* mipmapped = reinterpret_cast<FakeMipmapped*>(m);
  return mipmapped != nullptr && mipmapped->magic == kMipmappedMagic ? mipmapped : nullptr;
}

FakeArray* liveArray(CUarray a) {
  auto* array = reinterpret_cast<FakeArray*>(a);
  return array != nullptr && array->magic == kArrayMagic ? array : nullptr;
}

// A side of a copy: its first byte, row pitch and rows per slice; false for a bad side.
bool sideOf(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x, size_t y, size_t z,
            size_t pitch, size_t height, const CUDA_MEMCPY3D& p, char*& base, size_t& outPitch, size_t& outHeight) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: {
      char* start = type == CU_MEMORYTYPE_HOST ? static_cast<char*>(const_cast<void*>(host))
                                               : reinterpret_cast<char*>(device);
      if (start == nullptr) return false;
      base = start + x + y * pitch + z * pitch * height;
      outPitch = pitch;
      outHeight = height;
      return true;
    }
    case CU_MEMORYTYPE_ARRAY: {
      FakeArray* a = liveArray(array);
      if (a == nullptr) return false;
      if (x + p.WidthInBytes > a->rowBytes || y + p.Height > a->rows || z + p.Depth > a->slices) return false;
      base = a->data + x + y * a->rowBytes + z * a->rowBytes * a->rows;
      outPitch = a->rowBytes;
      outHeight = a->rows;
      return true;
    }
    default:
      return false;
  }
}

CUresult createArray(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (out == nullptr || d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t element = formatBytes(d->Format);
  bool layered = (d->Flags & CUDA_ARRAY3D_LAYERED) != 0, cubemap = (d->Flags & CUDA_ARRAY3D_CUBEMAP) != 0;
  if (element == 0 || d->Width == 0 || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
      d->Width > kMaxDimension || d->Height > kMaxDimension || d->Depth > kMaxDimension ||
      (d->Height == 0 && d->Depth != 0 && !layered) ||
      (cubemap && (d->Width != d->Height || d->Depth == 0 || d->Depth % 6 != 0 || (!layered && d->Depth != 6)))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* a = new FakeArray;
  a->descriptor = *d;
  a->rowBytes = element * d->NumChannels * d->Width;
  a->rows = d->Height == 0 ? 1 : d->Height;
  a->slices = d->Depth == 0 ? 1 : d->Depth;
  a->data = static_cast<char*>(std::malloc(a->rowBytes * a->rows * a->slices));
  if (a->data == nullptr) {
    delete a;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

void freeArray(FakeArray* a) {
  a->magic = 0;
  std::free(a->data);
  delete a;
}

CUresult destroyObject(unsigned long long value, bool surface) {
  std::lock_guard lock(mutex);
  auto it = objects.find(value);
  if (it == objects.end() || it->second.surface != surface) return CUDA_ERROR_INVALID_VALUE;
  // Reads the array: one destroyed under its object is a use-after-free here.
  if (it->second.array != nullptr && it->second.array->magic != kArrayMagic) return CUDA_ERROR_ILLEGAL_STATE;
  if (it->second.mipmapped != nullptr && it->second.mipmapped->magic != kMipmappedMagic) return CUDA_ERROR_ILLEGAL_STATE;
  objects.erase(it);
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  CUresult r = createArray(out, d);
  if (r == CUDA_SUCCESS) ++liveArrays;
  return r;
}

CUresult CUDAAPI cuArrayDestroy(CUarray array) {
  FakeArray* a = liveArray(array);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  freeArray(a);
  --liveArrays;
  return CUDA_SUCCESS;
}

// Levels halve every dimension they have (not layers), down to 1; at most log2(largest) + 1.
CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels) {
  if (out == nullptr || d == nullptr || levels == 0) return CUDA_ERROR_INVALID_VALUE;
  bool layers = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  size_t largest = std::max<size_t>({d->Width, d->Height, layers ? 0 : d->Depth});
  unsigned most = 1;
  while ((largest >> most) != 0) ++most;
  if (levels > most) return CUDA_ERROR_INVALID_VALUE;
  auto* m = new FakeMipmapped;
  for (unsigned l = 0; l < levels; ++l) {
    CUDA_ARRAY3D_DESCRIPTOR level = *d;
    level.Width = std::max<size_t>(d->Width >> l, 1);
    level.Height = d->Height == 0 ? 0 : std::max<size_t>(d->Height >> l, 1);
    level.Depth = d->Depth == 0 || layers ? d->Depth : std::max<size_t>(d->Depth >> l, 1);
    CUarray array = nullptr;
    if (CUresult r = createArray(&array, &level); r != CUDA_SUCCESS) {
      for (FakeArray* a : m->levels) freeArray(a);
      delete m;
      return r;
    }
    m->levels.push_back(reinterpret_cast<FakeArray*>(array));
  }
  ++mipmappedCount;
  *out = reinterpret_cast<CUmipmappedArray>(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray* out, CUmipmappedArray mipmapped, unsigned level) {
  FakeMipmapped* m = liveMipmapped(mipmapped);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (out == nullptr || level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUarray>(m->levels[level]);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray mipmapped) {
  FakeMipmapped* m = liveMipmapped(mipmapped);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (FakeArray* a : m->levels) freeArray(a);
  m->magic = 0;
  delete m;
  --mipmappedCount;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* d, CUarray array) {
  FakeArray* a = liveArray(array);
  if (a == nullptr || d == nullptr) return a == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_INVALID_VALUE;
  *d = a->descriptor;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  char *src = nullptr, *dst = nullptr;
  size_t srcPitch = 0, srcHeight = 0, dstPitch = 0, dstHeight = 0;
  if (!sideOf(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
              p->srcHeight, *p, src, srcPitch, srcHeight) ||
      !sideOf(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
              p->dstHeight, *p, dst, dstPitch, dstHeight)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t depth = p->Depth == 0 ? 1 : p->Depth, height = p->Height == 0 ? 1 : p->Height;
  for (size_t z = 0; z < depth; ++z) {
    for (size_t y = 0; y < height; ++y) {
      std::memcpy(dst + z * dstPitch * dstHeight + y * dstPitch, src + z * srcPitch * srcHeight + y * srcPitch,
                  p->WidthInBytes);
    }
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) { return cuMemcpy3DAsync_v2(p, nullptr); }

CUresult CUDAAPI cuTexObjectCreate(CUtexObject* out, const CUDA_RESOURCE_DESC* resource, const CUDA_TEXTURE_DESC* texture,
                                   const CUDA_RESOURCE_VIEW_DESC*) {
  if (out == nullptr || resource == nullptr || texture == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeObject object;
  if (resource->resType == CU_RESOURCE_TYPE_ARRAY) {
    object.array = liveArray(resource->res.array.hArray);
    if (object.array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  } else if (resource->resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    object.mipmapped = liveMipmapped(resource->res.mipmap.hMipmappedArray);
    if (object.mipmapped == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  } else if (resource->resType == CU_RESOURCE_TYPE_LINEAR) {
    if (resource->res.linear.devPtr == 0 || formatBytes(resource->res.linear.format) == 0) return CUDA_ERROR_INVALID_VALUE;
  } else if (resource->resType == CU_RESOURCE_TYPE_PITCH2D) {
    if (resource->res.pitch2D.devPtr == 0 || formatBytes(resource->res.pitch2D.format) == 0) return CUDA_ERROR_INVALID_VALUE;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard lock(mutex);
  *out = nextObject++;
  objects[*out] = object;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject* out, const CUDA_RESOURCE_DESC* resource) {
  if (out == nullptr || resource == nullptr || resource->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
  FakeArray* a = liveArray(resource->res.array.hArray);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->descriptor.Flags & CUDA_ARRAY3D_SURFACE_LDST) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(mutex);
  *out = nextObject++;
  objects[*out] = FakeObject{a, true, nullptr};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuTexObjectDestroy(CUtexObject object) { return destroyObject(object, false); }
CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject object) { return destroyObject(object, true); }

size_t tallyFakeLiveArrays() { return liveArrays.load(); }
size_t tallyFakeLiveMipmappedArrays() { return mipmappedCount.load(); }
size_t tallyFakeLiveObjects() {
  std::lock_guard lock(mutex);
  return objects.size();
}

}  // extern "C"
