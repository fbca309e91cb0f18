// Texture and surface objects (cudaCreateTextureObject, cuTexObjectCreate, cudaCreateSurfaceObject,
// cuSurfObjectCreate …). tallyd creates them with the driver and answers the driver's 64-bit
// value, which kernels take as a parameter, so the application gets that value as it is. The
// descriptors they were made from are kept here (in the driver's terms) for the Get* queries.
// Resources: arrays, mipmapped arrays, linear and pitch-2D device memory.
// Legacy texture and surface references (cuTexRef*, cuSurfRef*) stay NotSupported: nvcc 13 no
// longer compiles texture<>/surface<> references (removed in CUDA 12), so only old binaries use them.
#include "client/api/array_handles.h"
#include "client/entry/not_supported.h"

#include <mutex>
#include <optional>
#include <unordered_map>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

struct ObjectRecord {
  CUDA_RESOURCE_DESC resource{};   // hArray: the application's handle
  CUDA_TEXTURE_DESC texture{};
  bool hasView = false;
  CUDA_RESOURCE_VIEW_DESC view{};
};

struct Objects {
  std::mutex mutex;
  std::unordered_map<uint64_t, ObjectRecord> textures;
  std::unordered_map<uint64_t, ObjectRecord> surfaces;
};

Objects& objects() {
  static auto* o = new Objects;  // never destroyed: used until the process ends
  return *o;
}

// What tallyd is not asked about: an array or mipmapped array that is not ours, an unknown type.
CUresult checkResource(const CUDA_RESOURCE_DESC& r) {
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY: return asArray(r.res.array.hArray) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      return asMipmapped(r.res.mipmap.hMipmappedArray) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_RESOURCE_TYPE_LINEAR: case CU_RESOURCE_TYPE_PITCH2D: return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

// The wire resource of one checkResource accepted.
void fillResource(wire::ResourceDesc::Builder b, const CUDA_RESOURCE_DESC& r) {
  b.setFlags(r.flags);
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      b.setArray(asArray(r.res.array.hArray)->id);
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      b.setMipmappedArray(asMipmapped(r.res.mipmap.hMipmappedArray)->id);
      break;
    case CU_RESOURCE_TYPE_LINEAR: {
      auto l = b.initLinear();
      l.setDevPtr(r.res.linear.devPtr);
      l.setFormat(static_cast<uint32_t>(r.res.linear.format));
      l.setNumChannels(r.res.linear.numChannels);
      l.setSizeInBytes(r.res.linear.sizeInBytes);
      break;
    }
    default: {
      auto p = b.initPitch2D();
      p.setDevPtr(r.res.pitch2D.devPtr);
      p.setFormat(static_cast<uint32_t>(r.res.pitch2D.format));
      p.setNumChannels(r.res.pitch2D.numChannels);
      p.setWidth(r.res.pitch2D.width);
      p.setHeight(r.res.pitch2D.height);
      p.setPitchInBytes(r.res.pitch2D.pitchInBytes);
      break;
    }
  }
}

void fillTexture(wire::TextureDesc::Builder b, const CUDA_TEXTURE_DESC& t) {
  auto modes = b.initAddressMode(3);
  for (unsigned i = 0; i < 3; ++i) modes.set(i, static_cast<uint32_t>(t.addressMode[i]));
  b.setFilterMode(static_cast<uint32_t>(t.filterMode));
  b.setFlags(t.flags);
  b.setMaxAnisotropy(t.maxAnisotropy);
  b.setMipmapFilterMode(static_cast<uint32_t>(t.mipmapFilterMode));
  b.setMipmapLevelBias(t.mipmapLevelBias);
  b.setMinMipmapLevelClamp(t.minMipmapLevelClamp);
  b.setMaxMipmapLevelClamp(t.maxMipmapLevelClamp);
  auto border = b.initBorderColor(4);
  for (unsigned i = 0; i < 4; ++i) border.set(i, t.borderColor[i]);
}

void fillView(wire::ResourceViewDesc::Builder b, const CUDA_RESOURCE_VIEW_DESC& v) {
  b.setFormat(static_cast<uint32_t>(v.format));
  b.setWidth(v.width);
  b.setHeight(v.height);
  b.setDepth(v.depth);
  b.setFirstMipmapLevel(v.firstMipmapLevel);
  b.setLastMipmapLevel(v.lastMipmapLevel);
  b.setFirstLayer(v.firstLayer);
  b.setLastLayer(v.lastLayer);
}

// The device a resource lives on as the client knows it: an array's, else the current one.
uint32_t deviceOf(const CUDA_RESOURCE_DESC& r) {
  if (r.resType == CU_RESOURCE_TYPE_ARRAY) {
    if (const ArrayHandle* a = asArray(r.res.array.hArray)) return a->device;
  }
  if (r.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    if (const MipmappedHandle* m = asMipmapped(r.res.mipmap.hMipmappedArray)) return m->device;
  }
  return currentDevice();
}

CUresult createObject(const ObjectRecord& record, bool surface, unsigned long long* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (CUresult r = checkResource(record.resource); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  auto build = [&](wire::Call::Builder c) {
    if (surface) {
      fillResource(c.initSurfaceCreate().initResource(), record.resource);
      return;
    }
    auto m = c.initTextureCreate();
    m.setDevice(deviceOf(record.resource));
    fillResource(m.initResource(), record.resource);
    fillTexture(m.initTexture(), record.texture);
    m.setHasView(record.hasView);
    if (record.hasView) fillView(m.initView(), record.view);
  };
  CUresult r = rt().call(build, &reply);
  if (r != CUDA_SUCCESS) return r;
  uint64_t value = reply.reply().getValue();
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  (surface ? o.surfaces : o.textures)[value] = record;
  *out = value;
  return CUDA_SUCCESS;
}

CUresult destroyObject(uint64_t value, bool surface) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    if (surface) {
      c.initSurfaceDestroy().setObject(value);
    } else {
      c.initTextureDestroy().setObject(value);
    }
  });
  if (r == CUDA_SUCCESS) {
    Objects& o = objects();
    std::lock_guard lock(o.mutex);
    (surface ? o.surfaces : o.textures).erase(value);
  }
  return r;
}

// The record of a live object (CUDA_ERROR_INVALID_VALUE when there is none).
CUresult findObject(uint64_t value, bool surface, ObjectRecord& out) {
  Objects& o = objects();
  std::lock_guard lock(o.mutex);
  auto& table = surface ? o.surfaces : o.textures;
  auto it = table.find(value);
  if (it == table.end()) return CUDA_ERROR_INVALID_VALUE;
  out = it->second;
  return CUDA_SUCCESS;
}

// --- the runtime's descriptors in the driver's terms, and back --------------------------------

bool isIntegerFormat(CUarray_format f) {
  return f != CU_AD_FORMAT_HALF && f != CU_AD_FORMAT_FLOAT;
}

// The format of a resource (for the read mode); CU_AD_FORMAT_FLOAT when it cannot be told.
CUarray_format formatOf(const CUDA_RESOURCE_DESC& r) {
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      if (const ArrayHandle* a = asArray(r.res.array.hArray)) return a->descriptor.Format;
      return CU_AD_FORMAT_FLOAT;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      if (const MipmappedHandle* m = asMipmapped(r.res.mipmap.hMipmappedArray)) return m->descriptor.Format;
      return CU_AD_FORMAT_FLOAT;
    case CU_RESOURCE_TYPE_LINEAR: return r.res.linear.format;
    case CU_RESOURCE_TYPE_PITCH2D: return r.res.pitch2D.format;
    default: return CU_AD_FORMAT_FLOAT;
  }
}

unsigned channelsOf(const CUDA_RESOURCE_DESC& r) {
  switch (r.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      if (const ArrayHandle* a = asArray(r.res.array.hArray)) return a->descriptor.NumChannels;
      return 1;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      if (const MipmappedHandle* m = asMipmapped(r.res.mipmap.hMipmappedArray)) return m->descriptor.NumChannels;
      return 1;
    case CU_RESOURCE_TYPE_LINEAR: return r.res.linear.numChannels;
    case CU_RESOURCE_TYPE_PITCH2D: return r.res.pitch2D.numChannels;
    default: return 1;
  }
}

CUresult resourceToDriver(const cudaResourceDesc& in, CUDA_RESOURCE_DESC& out) {
  out = CUDA_RESOURCE_DESC{};
  out.flags = in.flags;
  unsigned channels = 0;
  CUarray_format format{};
  auto channelDesc = [&](const cudaChannelFormatDesc& d) {
    if (formatOfChannelDesc(d, format, channels)) return CUDA_SUCCESS;
    if (d.f > cudaChannelFormatKindFloat && d.f != cudaChannelFormatKindNone) {
      reportNotSupported("texture objects of normalized, planar or block-compressed channel formats");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    return static_cast<CUresult>(cudaErrorInvalidChannelDescriptor);
  };
  switch (in.resType) {
    case cudaResourceTypeArray:
      out.resType = CU_RESOURCE_TYPE_ARRAY;
      out.res.array.hArray = reinterpret_cast<CUarray>(in.res.array.array);
      return CUDA_SUCCESS;
    case cudaResourceTypeMipmappedArray:
      out.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
      out.res.mipmap.hMipmappedArray = reinterpret_cast<CUmipmappedArray>(in.res.mipmap.mipmap);
      return CUDA_SUCCESS;
    case cudaResourceTypeLinear:
      if (CUresult r = channelDesc(in.res.linear.desc); r != CUDA_SUCCESS) return r;
      out.resType = CU_RESOURCE_TYPE_LINEAR;
      out.res.linear.devPtr = reinterpret_cast<CUdeviceptr>(in.res.linear.devPtr);
      out.res.linear.format = format;
      out.res.linear.numChannels = channels;
      out.res.linear.sizeInBytes = in.res.linear.sizeInBytes;
      return CUDA_SUCCESS;
    case cudaResourceTypePitch2D:
      if (CUresult r = channelDesc(in.res.pitch2D.desc); r != CUDA_SUCCESS) return r;
      out.resType = CU_RESOURCE_TYPE_PITCH2D;
      out.res.pitch2D.devPtr = reinterpret_cast<CUdeviceptr>(in.res.pitch2D.devPtr);
      out.res.pitch2D.format = format;
      out.res.pitch2D.numChannels = channels;
      out.res.pitch2D.width = in.res.pitch2D.width;
      out.res.pitch2D.height = in.res.pitch2D.height;
      out.res.pitch2D.pitchInBytes = in.res.pitch2D.pitchInBytes;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

cudaResourceDesc resourceToRuntime(const CUDA_RESOURCE_DESC& in) {
  cudaResourceDesc out{};
  out.flags = in.flags;
  switch (in.resType) {
    case CU_RESOURCE_TYPE_ARRAY:
      out.resType = cudaResourceTypeArray;
      out.res.array.array = reinterpret_cast<cudaArray_t>(in.res.array.hArray);
      break;
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      out.resType = cudaResourceTypeMipmappedArray;
      out.res.mipmap.mipmap = reinterpret_cast<cudaMipmappedArray_t>(in.res.mipmap.hMipmappedArray);
      break;
    case CU_RESOURCE_TYPE_LINEAR:
      out.resType = cudaResourceTypeLinear;
      out.res.linear.devPtr = reinterpret_cast<void*>(in.res.linear.devPtr);
      out.res.linear.desc = channelDescOf(in.res.linear.format, in.res.linear.numChannels);
      out.res.linear.sizeInBytes = in.res.linear.sizeInBytes;
      break;
    case CU_RESOURCE_TYPE_PITCH2D:
      out.resType = cudaResourceTypePitch2D;
      out.res.pitch2D.devPtr = reinterpret_cast<void*>(in.res.pitch2D.devPtr);
      out.res.pitch2D.desc = channelDescOf(in.res.pitch2D.format, in.res.pitch2D.numChannels);
      out.res.pitch2D.width = in.res.pitch2D.width;
      out.res.pitch2D.height = in.res.pitch2D.height;
      out.res.pitch2D.pitchInBytes = in.res.pitch2D.pitchInBytes;
      break;
    default:
      break;
  }
  return out;
}

// The runtime's read mode is the driver's CU_TRSF_READ_AS_INTEGER for 8- and 16-bit integer
// formats (the only ones it changes); the other flags map one to one.
CUDA_TEXTURE_DESC textureToDriver(const cudaTextureDesc& in, CUarray_format format) {
  CUDA_TEXTURE_DESC out{};
  for (unsigned i = 0; i < 3; ++i) out.addressMode[i] = static_cast<CUaddress_mode>(in.addressMode[i]);
  out.filterMode = static_cast<CUfilter_mode>(in.filterMode);
  if (in.readMode == cudaReadModeElementType && isIntegerFormat(format)) out.flags |= CU_TRSF_READ_AS_INTEGER;
  if (in.normalizedCoords != 0) out.flags |= CU_TRSF_NORMALIZED_COORDINATES;
  if (in.sRGB != 0) out.flags |= CU_TRSF_SRGB;
  if (in.disableTrilinearOptimization != 0) out.flags |= CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
  if (in.seamlessCubemap != 0) out.flags |= CU_TRSF_SEAMLESS_CUBEMAP;
  out.maxAnisotropy = in.maxAnisotropy;
  out.mipmapFilterMode = static_cast<CUfilter_mode>(in.mipmapFilterMode);
  out.mipmapLevelBias = in.mipmapLevelBias;
  out.minMipmapLevelClamp = in.minMipmapLevelClamp;
  out.maxMipmapLevelClamp = in.maxMipmapLevelClamp;
  for (unsigned i = 0; i < 4; ++i) out.borderColor[i] = in.borderColor[i];
  return out;
}

cudaTextureDesc textureToRuntime(const CUDA_TEXTURE_DESC& in, CUarray_format format, unsigned channels) {
  cudaTextureDesc out{};
  for (unsigned i = 0; i < 3; ++i) out.addressMode[i] = static_cast<cudaTextureAddressMode>(in.addressMode[i]);
  out.filterMode = static_cast<cudaTextureFilterMode>(in.filterMode);
  bool promoted = isIntegerFormat(format) && arrayElementBytes(format, channels) / channels < 4;
  out.readMode = promoted && (in.flags & CU_TRSF_READ_AS_INTEGER) == 0 ? cudaReadModeNormalizedFloat
                                                                       : cudaReadModeElementType;
  out.normalizedCoords = (in.flags & CU_TRSF_NORMALIZED_COORDINATES) != 0;
  out.sRGB = (in.flags & CU_TRSF_SRGB) != 0;
  out.disableTrilinearOptimization = (in.flags & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION) != 0;
  out.seamlessCubemap = (in.flags & CU_TRSF_SEAMLESS_CUBEMAP) != 0;
  out.maxAnisotropy = in.maxAnisotropy;
  out.mipmapFilterMode = static_cast<cudaTextureFilterMode>(in.mipmapFilterMode);
  out.mipmapLevelBias = in.mipmapLevelBias;
  out.minMipmapLevelClamp = in.minMipmapLevelClamp;
  out.maxMipmapLevelClamp = in.maxMipmapLevelClamp;
  for (unsigned i = 0; i < 4; ++i) out.borderColor[i] = in.borderColor[i];
  return out;
}

// The two view descriptors share their format numbering (cudaResViewFormat* = CU_RES_VIEW_FORMAT_*).
CUDA_RESOURCE_VIEW_DESC viewToDriver(const cudaResourceViewDesc& in) {
  CUDA_RESOURCE_VIEW_DESC out{};
  out.format = static_cast<CUresourceViewFormat>(in.format);
  out.width = in.width;
  out.height = in.height;
  out.depth = in.depth;
  out.firstMipmapLevel = in.firstMipmapLevel;
  out.lastMipmapLevel = in.lastMipmapLevel;
  out.firstLayer = in.firstLayer;
  out.lastLayer = in.lastLayer;
  return out;
}

cudaResourceViewDesc viewToRuntime(const CUDA_RESOURCE_VIEW_DESC& in) {
  cudaResourceViewDesc out{};
  out.format = static_cast<cudaResourceViewFormat>(in.format);
  out.width = in.width;
  out.height = in.height;
  out.depth = in.depth;
  out.firstMipmapLevel = in.firstMipmapLevel;
  out.lastMipmapLevel = in.lastMipmapLevel;
  out.firstLayer = in.firstLayer;
  out.lastLayer = in.lastLayer;
  return out;
}

// One query of an object's descriptors: `describe` turns the record into what the caller asked for
// (nullopt: the object has no such descriptor).
template <typename Out, typename Describe>
CUresult describeObject(Out* out, uint64_t object, bool surface, Describe describe) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ObjectRecord record;
  if (CUresult r = findObject(object, surface, record); r != CUDA_SUCCESS) return r;
  std::optional<Out> described = describe(record);
  if (!described) return CUDA_ERROR_INVALID_VALUE;
  *out = *described;
  return CUDA_SUCCESS;
}

}  // namespace

// --- runtime ---------------------------------------------------------------------------------------

TALLY_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t* object, const cudaResourceDesc* resource,
                                              const cudaTextureDesc* texture, const cudaResourceViewDesc* view) {
  return guardRuntime(__func__, [&] {
    if (object == nullptr || resource == nullptr || texture == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ObjectRecord record;
    if (CUresult r = resourceToDriver(*resource, record.resource); r != CUDA_SUCCESS) return r;
    record.texture = textureToDriver(*texture, formatOf(record.resource));
    record.hasView = view != nullptr;
    if (view != nullptr) record.view = viewToDriver(*view);
    return createObject(record, false, object);
  });
}

TALLY_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t object) {
  return guardRuntime(__func__, [&] { return object == 0 ? rt().ready() : destroyObject(object, false); });
}

TALLY_API cudaError_t cudaGetTextureObjectResourceDesc(cudaResourceDesc* out, cudaTextureObject_t object) {
  return guardRuntime(__func__, [&] {
    return describeObject(out, object, false, [](const ObjectRecord& r) -> std::optional<cudaResourceDesc> {
      return resourceToRuntime(r.resource);
    });
  });
}

TALLY_API cudaError_t cudaGetTextureObjectTextureDesc(cudaTextureDesc* out, cudaTextureObject_t object) {
  return guardRuntime(__func__, [&] {
    return describeObject(out, object, false, [](const ObjectRecord& r) -> std::optional<cudaTextureDesc> {
      return textureToRuntime(r.texture, formatOf(r.resource), channelsOf(r.resource));
    });
  });
}

TALLY_API cudaError_t cudaGetTextureObjectResourceViewDesc(cudaResourceViewDesc* out, cudaTextureObject_t object) {
  return guardRuntime(__func__, [&] {
    return describeObject(out, object, false, [](const ObjectRecord& r) -> std::optional<cudaResourceViewDesc> {
      if (!r.hasView) return std::nullopt;
      return viewToRuntime(r.view);
    });
  });
}

TALLY_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t* object, const cudaResourceDesc* resource) {
  return guardRuntime(__func__, [&] {
    if (object == nullptr || resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (resource->resType != cudaResourceTypeArray) return CUDA_ERROR_INVALID_VALUE;
    ObjectRecord record;
    if (CUresult r = resourceToDriver(*resource, record.resource); r != CUDA_SUCCESS) return r;
    return createObject(record, true, object);
  });
}

TALLY_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t object) {
  return guardRuntime(__func__, [&] { return object == 0 ? rt().ready() : destroyObject(object, true); });
}

TALLY_API cudaError_t cudaGetSurfaceObjectResourceDesc(cudaResourceDesc* out, cudaSurfaceObject_t object) {
  return guardRuntime(__func__, [&] {
    return describeObject(out, object, true, [](const ObjectRecord& r) -> std::optional<cudaResourceDesc> {
      return resourceToRuntime(r.resource);
    });
  });
}

// --- driver ----------------------------------------------------------------------------------------

TALLY_API CUresult cuTexObjectCreate(CUtexObject* object, const CUDA_RESOURCE_DESC* resource,
                                     const CUDA_TEXTURE_DESC* texture, const CUDA_RESOURCE_VIEW_DESC* view) {
  return guardDriver(__func__, [&] {
    if (object == nullptr || resource == nullptr || texture == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ObjectRecord record{*resource, *texture, view != nullptr, view != nullptr ? *view : CUDA_RESOURCE_VIEW_DESC{}};
    return createObject(record, false, object);
  });
}

TALLY_API CUresult cuTexObjectDestroy(CUtexObject object) {
  return guardDriver(__func__, [&] { return destroyObject(object, false); });
}

TALLY_API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUtexObject object) {
  return guardDriver(__func__, [&] {
    return describeObject(out, object, false, [](const ObjectRecord& r) -> std::optional<CUDA_RESOURCE_DESC> {
      return r.resource;
    });
  });
}

TALLY_API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* out, CUtexObject object) {
  return guardDriver(__func__, [&] {
    return describeObject(out, object, false, [](const ObjectRecord& r) -> std::optional<CUDA_TEXTURE_DESC> {
      return r.texture;
    });
  });
}

TALLY_API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC* out, CUtexObject object) {
  return guardDriver(__func__, [&] {
    return describeObject(out, object, false, [](const ObjectRecord& r) -> std::optional<CUDA_RESOURCE_VIEW_DESC> {
      if (!r.hasView) return std::nullopt;
      return r.view;
    });
  });
}

TALLY_API CUresult cuSurfObjectCreate(CUsurfObject* object, const CUDA_RESOURCE_DESC* resource) {
  return guardDriver(__func__, [&] {
    if (object == nullptr || resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (resource->resType != CU_RESOURCE_TYPE_ARRAY) return CUDA_ERROR_INVALID_VALUE;
    ObjectRecord record;
    record.resource = *resource;
    return createObject(record, true, object);
  });
}

TALLY_API CUresult cuSurfObjectDestroy(CUsurfObject object) {
  return guardDriver(__func__, [&] { return destroyObject(object, true); });
}

TALLY_API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* out, CUsurfObject object) {
  return guardDriver(__func__, [&] {
    return describeObject(out, object, true, [](const ObjectRecord& r) -> std::optional<CUDA_RESOURCE_DESC> {
      return r.resource;
    });
  });
}
