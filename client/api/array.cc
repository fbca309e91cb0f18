// CUDA arrays (cudaMallocArray, cudaMalloc3DArray, cuArrayCreate, cuArray3DCreate …), mipmapped
// arrays (cudaMallocMipmappedArray, cudaGetMipmappedArrayLevel, cuMipmappedArray*) and the
// copies to, from and between them (cudaMemcpy2DToArray, cudaMemcpy3D, cuMemcpy3D, cuMemcpyHtoA …).
// An array lives in tallyd under an id chosen here; the application holds an ArrayHandle, whose
// descriptor answers the queries. Every copy becomes one or more ArrayCopy calls (schema/array.capnp):
// host bytes travel as bulk, packed, in pieces of at most kBulkChunk, or stay in host memory shared
// with tallyd; device memory and arrays are named as they are and checked by tallyd.
#include "client/api/array_handles.h"
#include "client/entry/not_supported.h"
#include "client/runtime/argument_checks.h"
#include "client/runtime/capture_table.h"
#include "client/transport/host_memory.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

using namespace tally::client;

namespace tally::client {

size_t arrayElementBytes(CUarray_format format, unsigned channels) {
  if (channels != 1 && channels != 2 && channels != 4) return 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return channels;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2 * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4 * channels;
    default: return 0;
  }
}

bool formatOfChannelDesc(const cudaChannelFormatDesc& desc, CUarray_format& format, unsigned& channels) {
  const int bits[4] = {desc.x, desc.y, desc.z, desc.w};
  channels = 0;
  while (channels < 4 && bits[channels] != 0) ++channels;
  for (unsigned i = 0; i < 4; ++i) {
    if ((i < channels && bits[i] != desc.x) || (i >= channels && bits[i] != 0)) return false;
  }
  if (channels == 0 || channels == 3) return false;
  switch (desc.f) {
    case cudaChannelFormatKindSigned:
      format = desc.x == 8 ? CU_AD_FORMAT_SIGNED_INT8 : desc.x == 16 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
      return desc.x == 8 || desc.x == 16 || desc.x == 32;
    case cudaChannelFormatKindUnsigned:
      format = desc.x == 8    ? CU_AD_FORMAT_UNSIGNED_INT8
               : desc.x == 16 ? CU_AD_FORMAT_UNSIGNED_INT16
                              : CU_AD_FORMAT_UNSIGNED_INT32;
      return desc.x == 8 || desc.x == 16 || desc.x == 32;
    case cudaChannelFormatKindFloat:
      format = desc.x == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
      return desc.x == 16 || desc.x == 32;
    default:
      return false;
  }
}

cudaChannelFormatDesc channelDescOf(CUarray_format format, unsigned channels) {
  cudaChannelFormatDesc d{0, 0, 0, 0, cudaChannelFormatKindNone};
  int bits = 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: bits = 8; d.f = cudaChannelFormatKindUnsigned; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: bits = 16; d.f = cudaChannelFormatKindUnsigned; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: bits = 32; d.f = cudaChannelFormatKindUnsigned; break;
    case CU_AD_FORMAT_SIGNED_INT8: bits = 8; d.f = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_SIGNED_INT16: bits = 16; d.f = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_SIGNED_INT32: bits = 32; d.f = cudaChannelFormatKindSigned; break;
    case CU_AD_FORMAT_HALF: bits = 16; d.f = cudaChannelFormatKindFloat; break;
    case CU_AD_FORMAT_FLOAT: bits = 32; d.f = cudaChannelFormatKindFloat; break;
    default: return d;
  }
  int* fields[4] = {&d.x, &d.y, &d.z, &d.w};
  for (unsigned i = 0; i < channels && i < 4; ++i) *fields[i] = bits;
  return d;
}

}  // namespace tally::client

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

constexpr size_t kBulkChunk = 32u << 20;  // as memory.cc: host bytes per ArrayCopy call

// --- arrays ------------------------------------------------------------------------------------

CUresult createArray(const CUDA_ARRAY3D_DESCRIPTOR& d, void** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;
  auto array = std::make_unique<ArrayHandle>();
  array->id = rt().newHandleId();
  array->device = currentDevice();
  array->descriptor = d;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto m = c.initArrayCreate();
    m.setDevice(array->device);
    m.setArray(array->id);
    auto w = m.initDescriptor();
    w.setWidth(d.Width);
    w.setHeight(d.Height);
    w.setDepth(d.Depth);
    w.setFormat(static_cast<uint32_t>(d.Format));
    w.setNumChannels(d.NumChannels);
    w.setFlags(d.Flags);
  });
  if (r != CUDA_SUCCESS) return r;
  registerHandle(array.get());
  *out = array.release();
  return CUDA_SUCCESS;
}

// A runtime channel descriptor and extent as the driver's 3D descriptor.
CUresult runtimeDescriptor(const cudaChannelFormatDesc* desc, cudaExtent extent, unsigned flags,
                           CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  unsigned channels = 0;
  CUarray_format format{};
  if (!formatOfChannelDesc(*desc, format, channels)) {
    if (desc->f > cudaChannelFormatKindFloat && desc->f != cudaChannelFormatKindNone) {
      reportNotSupported("CUDA arrays of normalized, planar or block-compressed channel formats");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    return static_cast<CUresult>(cudaErrorInvalidChannelDescriptor);
  }
  d = CUDA_ARRAY3D_DESCRIPTOR{};
  d.Width = extent.width;
  d.Height = extent.height;
  d.Depth = extent.depth;
  d.Format = format;
  d.NumChannels = channels;
  d.Flags = flags;
  return CUDA_SUCCESS;
}

// cudaFreeArray synchronizes as natively (tallyd clears the memory once the tenant's work passed).
CUresult destroyArray(const void* handle) {
  ArrayHandle* array = asArray(handle);
  if (array == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (array->level) return CUDA_ERROR_INVALID_VALUE;  // its mipmapped array's memory
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;
  CUresult r = rt().sync([&](wire::Call::Builder c) { c.initArrayDestroy().setArray(array->id); });
  handleRegistry().remove(array);
  delete array;
  return r;
}

// --- mipmapped arrays ----------------------------------------------------------------------------

CUresult createMipmapped(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels, void** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;
  auto mipmapped = std::make_unique<MipmappedHandle>();
  mipmapped->id = rt().newHandleId();
  mipmapped->device = currentDevice();
  mipmapped->descriptor = d;
  mipmapped->levels = levels;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto m = c.initMipmappedArrayCreate();
    m.setDevice(mipmapped->device);
    m.setMipmappedArray(mipmapped->id);
    m.setNumLevels(levels);
    auto w = m.initDescriptor();
    w.setWidth(d.Width);
    w.setHeight(d.Height);
    w.setDepth(d.Depth);
    w.setFormat(static_cast<uint32_t>(d.Format));
    w.setNumChannels(d.NumChannels);
    w.setFlags(d.Flags);
  });
  if (r != CUDA_SUCCESS) return r;
  mipmapped->levelArrays.assign(levels, nullptr);
  registerHandle(mipmapped.get());
  *out = mipmapped.release();
  return CUDA_SUCCESS;
}

// The array of one level: the same handle for every ask, as natively.
CUresult mipmappedLevel(const void* handle, unsigned level, void** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  MipmappedHandle* m = asMipmapped(handle);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (level >= m->levels) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(m->mutex);
  if (ArrayHandle* known = m->levelArrays[level]) {
    *out = known;
    return CUDA_SUCCESS;
  }
  auto array = std::make_unique<ArrayHandle>();
  array->id = rt().newHandleId();
  array->device = m->device;
  array->level = true;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto g = c.initMipmappedArrayGetLevel();
    g.setMipmappedArray(m->id);
    g.setLevel(level);
    g.setArray(array->id);
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  if (!reply.reply().isArrayDescriptor()) return CUDA_ERROR_UNKNOWN;
  auto d = reply.reply().getArrayDescriptor();
  array->descriptor.Width = d.getWidth();
  array->descriptor.Height = d.getHeight();
  array->descriptor.Depth = d.getDepth();
  array->descriptor.Format = static_cast<CUarray_format>(d.getFormat());
  array->descriptor.NumChannels = d.getNumChannels();
  array->descriptor.Flags = d.getFlags();
  registerHandle(array.get());
  m->levelArrays[level] = array.release();
  *out = m->levelArrays[level];
  return CUDA_SUCCESS;
}

CUresult destroyMipmapped(const void* handle) {
  MipmappedHandle* m = asMipmapped(handle);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;
  CUresult r = rt().sync([&](wire::Call::Builder c) { c.initMipmappedArrayDestroy().setArray(m->id); });
  for (ArrayHandle* level : m->levelArrays) {
    if (level == nullptr) continue;
    handleRegistry().remove(level);
    delete level;
  }
  handleRegistry().remove(m);
  delete m;
  return r;
}

// --- copies ------------------------------------------------------------------------------------

bool isDevicePointer(uint64_t p) { return rt().findDeviceRegion(p).has_value(); }

// One side of a copy as the client sees it.
struct Side {
  enum Kind { kHost, kDevice, kArray } kind = kHost;
  uint64_t address = 0;        // host or device
  const ArrayHandle* array = nullptr;
  size_t x = 0, y = 0, z = 0, pitch = 0, height = 0;
  bool shared = false;         // host memory shared with tallyd (the whole range)
};

CUresult sideOf(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x, size_t y, size_t z,
                size_t pitch, size_t height, Side& out) {
  out = Side{};
  out.x = x;
  out.y = y;
  out.z = z;
  out.pitch = pitch;
  out.height = height;
  switch (type) {
    case CU_MEMORYTYPE_HOST: out.address = reinterpret_cast<uint64_t>(host); break;
    case CU_MEMORYTYPE_DEVICE: out.kind = Side::kDevice; out.address = device; break;
    case CU_MEMORYTYPE_UNIFIED:
      out.address = device;
      if (isDevicePointer(device)) out.kind = Side::kDevice;
      break;
    case CU_MEMORYTYPE_ARRAY:
      out.kind = Side::kArray;
      out.array = asArray(array);
      if (out.array == nullptr) return CUDA_ERROR_INVALID_VALUE;
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  if (out.kind != Side::kArray && out.address == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

struct Extent {
  size_t width, height, depth;
};

// Address of row `row` of slice `slice` of a linear side (offsets included).
uint64_t rowAddress(const Side& s, size_t slice, size_t row) {
  return s.address + s.x + (s.y + row) * s.pitch + (s.z + slice) * s.pitch * s.height;
}

// Checks a host side's rows (every slice), and whether it lies in host memory shared with tallyd.
CUresult checkHostSide(Side& s, const Extent& e, HostAccess access) {
  if (e.height > 1 && s.pitch < e.width) return static_cast<CUresult>(cudaErrorInvalidPitchValue);
  if (e.depth > 1 && s.height < e.height) return CUDA_ERROR_INVALID_VALUE;
  uint64_t first = rowAddress(s, 0, 0), last = rowAddress(s, e.depth - 1, e.height - 1) + e.width;
  if (last < first) return CUDA_ERROR_INVALID_VALUE;
  if (auto region = rt().findHostRegion(reinterpret_cast<const void*>(first));
      region && last - region->first <= region->second.size) {
    s.shared = region->second.shared;
    return CUDA_SUCCESS;
  }
  for (size_t z = 0; z < e.depth; ++z) {
    if (CUresult r = checkHostRows(rowAddress(s, z, 0), e.width, std::max(s.pitch, e.width), e.height, access);
        r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

// A piece of a copy: `depth` slices from `z`, rows [row, row + rows), bytes [column, column + bytes).
struct Piece {
  size_t z, depth, row, rows, column, bytes;
  size_t size() const { return depth * rows * bytes; }
};

std::vector<Piece> piecesOf(const Extent& e, size_t limit) {
  if (e.width * e.height * e.depth <= limit) return {Piece{0, e.depth, 0, e.height, 0, e.width}};
  std::vector<Piece> out;
  for (size_t z = 0; z < e.depth; ++z) {
    if (e.width <= limit) {
      size_t rowsPer = limit / e.width;
      for (size_t row = 0; row < e.height; row += rowsPer) out.push_back(Piece{z, 1, row, std::min(rowsPer, e.height - row), 0, e.width});
      continue;
    }
    for (size_t row = 0; row < e.height; ++row) {
      for (size_t column = 0; column < e.width; column += limit) {
        out.push_back(Piece{z, 1, row, 1, column, std::min(limit, e.width - column)});
      }
    }
  }
  return out;
}

void fillSide(wire::CopySide::Builder b, const Side& s, const Piece& piece, bool bulk) {
  if (bulk) {
    b.setHost();
    return;
  }
  switch (s.kind) {
    case Side::kArray: b.setArray(s.array->id); break;
    case Side::kDevice: b.setDevice(s.address); break;
    case Side::kHost: b.setHostShared(s.address); break;
  }
  b.setXInBytes(s.x + piece.column);
  b.setY(s.y + piece.row);
  b.setZ(s.z + piece.z);
  b.setPitch(s.pitch);
  b.setHeight(s.height);
}

// Host to host: done here, after the stream's earlier work for a synchronous copy.
CUresult copyHostToHost(const Side& src, const Side& dst, const Extent& e, uint64_t stream, bool sync) {
  if (sync) {
    if (CUresult r = rt().sync([&](wire::Call::Builder c) { c.initStreamSynchronize().setStream(stream); });
        r != CUDA_SUCCESS) {
      return r;
    }
  }
  for (size_t z = 0; z < e.depth; ++z) {
    for (size_t y = 0; y < e.height; ++y) {
      std::memmove(reinterpret_cast<void*>(rowAddress(dst, z, y)), reinterpret_cast<const void*>(rowAddress(src, z, y)),
                   e.width);
    }
  }
  return CUDA_SUCCESS;
}

// The rows of `piece` of a linear host side packed into `out` (false: the memory went away).
bool pack(const Side& s, const Piece& piece, std::vector<char>& out) {
  out.resize(piece.size());
  char* next = out.data();
  for (size_t z = 0; z < piece.depth; ++z) {
    for (size_t row = 0; row < piece.rows; ++row, next += piece.bytes) {
      auto from = reinterpret_cast<const void*>(rowAddress(s, piece.z + z, piece.row + row) + piece.column);
      if (!host_memory::copyIn(next, from, piece.bytes)) return false;
    }
  }
  return true;
}

bool unpack(const Side& s, const Piece& piece, const std::vector<char>& in) {
  const char* next = in.data();
  for (size_t z = 0; z < piece.depth; ++z) {
    for (size_t row = 0; row < piece.rows; ++row, next += piece.bytes) {
      auto to = reinterpret_cast<void*>(rowAddress(s, piece.z + z, piece.row + row) + piece.column);
      if (!host_memory::copyOut(to, next, piece.bytes)) return false;
    }
  }
  return true;
}

CUresult forward(const Side& src, const Side& dst, const Extent& e, uint64_t stream, bool sync) {
  const bool bulkIn = src.kind == Side::kHost && !src.shared;
  const bool bulkOut = dst.kind == Side::kHost && !dst.shared;
  // Bytes are taken now: the host callbacks enqueued before this copy must have run.
  if (bulkIn) rt().waitForHostCallbacks();
  std::vector<Piece> pieces = piecesOf(e, bulkIn || bulkOut ? kBulkChunk : SIZE_MAX);
  std::vector<char> bytes;
  Connection& connection = rt().connection();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& piece = pieces[i];
    bool last = i + 1 == pieces.size();
    if (bulkIn && !pack(src, piece, bytes)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t token = 0;
    if (bulkOut) {
      bytes.resize(piece.size());
      token = connection.expectHostData(bytes.data(), bytes.size());
    }
    auto build = [&](wire::Call::Builder c) {
      auto m = c.initArrayCopy();
      m.setStream(stream);
      fillSide(m.initSrc(), src, piece, bulkIn);
      fillSide(m.initDst(), dst, piece, bulkOut);
      m.setWidthInBytes(piece.bytes);
      m.setHeight(piece.rows);
      m.setDepth(piece.depth);
      m.setToken(token);
    };
    iovec bulk{bytes.data(), bytes.size()};
    std::span<const iovec> parts(&bulk, bulkIn ? 1 : 0);
    CUresult r = CUDA_SUCCESS;
    if (bulkOut) {
      // The bytes come back with the reply: waited for, whatever the call (as for pageable memory).
      r = sync ? rt().sync(build) : rt().call(build);
      if (!connection.forgetHostData(token) && r == CUDA_SUCCESS) r = CUDA_ERROR_INVALID_VALUE;
      if (r == CUDA_SUCCESS && !unpack(dst, piece, bytes)) r = CUDA_ERROR_INVALID_VALUE;
    } else {
      r = sync && last ? rt().sync(build, nullptr, parts) : rt().post(build, parts);
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// Checks a linear device side's shape (tallyd checks that the memory is the tenant's).
CUresult checkDeviceSide(const Side& s, const Extent& e) {
  if (e.height > 1 && s.pitch < e.width) return static_cast<CUresult>(cudaErrorInvalidPitchValue);
  if (e.depth > 1 && s.height < e.height) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace

namespace tally::client {

CUresult copy3D(const CUDA_MEMCPY3D& p, CUstream stream, bool sync) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  Side src, dst;
  if (CUresult r = sideOf(p.srcMemoryType, p.srcHost, p.srcDevice, p.srcArray, p.srcXInBytes, p.srcY, p.srcZ,
                          p.srcPitch, p.srcHeight, src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (CUresult r = sideOf(p.dstMemoryType, p.dstHost, p.dstDevice, p.dstArray, p.dstXInBytes, p.dstY, p.dstZ,
                          p.dstPitch, p.dstHeight, dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  Extent e{p.WidthInBytes, p.Height, p.Depth};
  if (e.width == 0 || e.height == 0 || e.depth == 0) return CUDA_SUCCESS;
  size_t total = 0;
  if (__builtin_mul_overflow(e.width, e.height, &total) || __builtin_mul_overflow(total, e.depth, &total)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (src.kind == Side::kHost) {
    if (CUresult r = checkHostSide(src, e, HostAccess::kRead); r != CUDA_SUCCESS) return r;
  } else if (src.kind == Side::kDevice) {
    if (CUresult r = checkDeviceSide(src, e); r != CUDA_SUCCESS) return r;
  }
  if (dst.kind == Side::kHost) {
    if (CUresult r = checkHostSide(dst, e, HostAccess::kWrite); r != CUDA_SUCCESS) return r;
  } else if (dst.kind == Side::kDevice) {
    if (CUresult r = checkDeviceSide(dst, e); r != CUDA_SUCCESS) return r;
  }
  if (src.kind == Side::kHost && dst.kind == Side::kHost) return copyHostToHost(src, dst, e, streamId, sync);
  // As memory.cc: a capture records copies of device memory, arrays and shared host memory only.
  if (captureTable().status(streamId).status != CU_STREAM_CAPTURE_STATUS_NONE) {
    bool bulk = (src.kind == Side::kHost && !src.shared) || (dst.kind == Side::kHost && !dst.shared);
    if (bulk || sync) {
      captureTable().invalidate(streamId);
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return forward(src, dst, e, streamId, sync);
}

}  // namespace tally::client

namespace {

// --- the runtime's copies, in the driver's terms ---------------------------------------------

// The memory type of a linear side of a runtime copy, from the direction: false when the
// direction names no such side (cudaErrorInvalidMemcpyDirection).
bool linearType(cudaMemcpyKind kind, bool source, CUmemorytype& type) {
  switch (kind) {
    case cudaMemcpyHostToDevice: type = source ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyDeviceToHost: type = source ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyDeviceToDevice: type = CU_MEMORYTYPE_DEVICE; return true;
    case cudaMemcpyHostToHost: type = CU_MEMORYTYPE_HOST; return true;
    case cudaMemcpyDefault: type = CU_MEMORYTYPE_UNIFIED; return true;
    default: return false;
  }
}

void setLinearSource(CUDA_MEMCPY3D& p, CUmemorytype type, const void* ptr) {
  p.srcMemoryType = type;
  if (type == CU_MEMORYTYPE_HOST) {
    p.srcHost = ptr;
  } else {
    p.srcDevice = reinterpret_cast<CUdeviceptr>(ptr);
  }
}

void setLinearDestination(CUDA_MEMCPY3D& p, CUmemorytype type, void* ptr) {
  p.dstMemoryType = type;
  if (type == CU_MEMORYTYPE_HOST) {
    p.dstHost = ptr;
  } else {
    p.dstDevice = reinterpret_cast<CUdeviceptr>(ptr);
  }
}

constexpr CUresult kInvalidDirection = static_cast<CUresult>(cudaErrorInvalidMemcpyDirection);

CUresult toArray2D(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch, size_t width,
                   size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  CUDA_MEMCPY3D p{};
  CUmemorytype type{};
  if (!linearType(kind, true, type) || kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) {
    return kInvalidDirection;
  }
  if (height > 1 && spitch < width) return static_cast<CUresult>(cudaErrorInvalidPitchValue);
  setLinearSource(p, type, src);
  p.srcPitch = spitch;
  p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  p.dstArray = reinterpret_cast<CUarray>(dst);
  p.dstXInBytes = wOffset;
  p.dstY = hOffset;
  p.WidthInBytes = width;
  p.Height = height;
  p.Depth = 1;
  return copy3D(p, stream, sync);
}

CUresult fromArray2D(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width,
                     size_t height, cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  CUDA_MEMCPY3D p{};
  CUmemorytype type{};
  if (!linearType(kind, false, type) || kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) {
    return kInvalidDirection;
  }
  if (height > 1 && dpitch < width) return static_cast<CUresult>(cudaErrorInvalidPitchValue);
  setLinearDestination(p, type, dst);
  p.dstPitch = dpitch;
  p.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  p.srcArray = reinterpret_cast<CUarray>(const_cast<cudaArray*>(src));
  p.srcXInBytes = wOffset;
  p.srcY = hOffset;
  p.WidthInBytes = width;
  p.Height = height;
  p.Depth = 1;
  return copy3D(p, stream, sync);
}

size_t rowBytesOf(const ArrayHandle& a) {
  return arrayElementBytes(a.descriptor.Format, a.descriptor.NumChannels) * a.descriptor.Width;
}

// cudaMemcpyToArray / FromArray (deprecated): `count` bytes from (wOffset, hOffset) on, in row
// order, so a copy may run on into the next rows: up to three 2D copies (the rest of the first
// row, whole rows, the start of the last).
template <typename Copy2DFn>
CUresult linearArrayCopy(const void* handle, size_t wOffset, size_t hOffset, size_t count, Copy2DFn copy2D) {
  const ArrayHandle* a = asArray(handle);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t rowBytes = rowBytesOf(*a);
  if (wOffset > rowBytes || rowBytes == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t done = 0;
  if (wOffset > 0 || count < rowBytes) {
    size_t first = std::min(count, rowBytes - wOffset);
    if (CUresult r = copy2D(0, wOffset, hOffset, rowBytes, first, 1); r != CUDA_SUCCESS) return r;
    done = first;
    ++hOffset;
  }
  size_t rows = (count - done) / rowBytes;
  if (rows > 0) {
    if (CUresult r = copy2D(done, 0, hOffset, rowBytes, rowBytes, rows); r != CUDA_SUCCESS) return r;
    done += rows * rowBytes;
    hOffset += rows;
  }
  if (done < count) return copy2D(done, 0, hOffset, rowBytes, count - done, 1);
  return CUDA_SUCCESS;
}

CUresult toArrayLinear(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                       cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  return linearArrayCopy(dst, wOffset, hOffset, count, [&](size_t from, size_t x, size_t y, size_t pitch, size_t width,
                                                          size_t rows) {
    return toArray2D(dst, x, y, static_cast<const char*>(src) + from, pitch, width, rows, kind, stream, sync);
  });
}

CUresult fromArrayLinear(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                         cudaMemcpyKind kind, cudaStream_t stream, bool sync) {
  return linearArrayCopy(src, wOffset, hOffset, count, [&](size_t to, size_t x, size_t y, size_t pitch, size_t width,
                                                          size_t rows) {
    return fromArray2D(static_cast<char*>(dst) + to, pitch, src, x, y, width, rows, kind, stream, sync);
  });
}

// cudaMemcpy3D: positions and the extent are in elements of an array side (bytes otherwise), and
// the extent's unit is the array's element when an array takes part.
CUresult runtimeCopy3D(const cudaMemcpy3DParms* p, cudaStream_t stream, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((p->srcArray != nullptr) == (p->srcPtr.ptr != nullptr) || (p->dstArray != nullptr) == (p->dstPtr.ptr != nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const ArrayHandle* srcArray = p->srcArray != nullptr ? asArray(p->srcArray) : nullptr;
  const ArrayHandle* dstArray = p->dstArray != nullptr ? asArray(p->dstArray) : nullptr;
  if ((p->srcArray != nullptr && srcArray == nullptr) || (p->dstArray != nullptr && dstArray == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto elementOf = [](const ArrayHandle* a) {
    return a != nullptr ? arrayElementBytes(a->descriptor.Format, a->descriptor.NumChannels) : size_t{1};
  };
  size_t srcElement = elementOf(srcArray), dstElement = elementOf(dstArray);
  size_t unit = srcArray != nullptr ? srcElement : dstElement;
  if (srcArray != nullptr && dstArray != nullptr && srcElement != dstElement) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D d{};
  CUmemorytype type{};
  if (srcArray != nullptr) {
    d.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    d.srcArray = reinterpret_cast<CUarray>(p->srcArray);
  } else {
    if (!linearType(p->kind, true, type)) return kInvalidDirection;
    setLinearSource(d, type, p->srcPtr.ptr);
    d.srcPitch = p->srcPtr.pitch;
    d.srcHeight = p->srcPtr.ysize;
  }
  if (dstArray != nullptr) {
    d.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    d.dstArray = reinterpret_cast<CUarray>(p->dstArray);
  } else {
    if (!linearType(p->kind, false, type)) return kInvalidDirection;
    setLinearDestination(d, type, p->dstPtr.ptr);
    d.dstPitch = p->dstPtr.pitch;
    d.dstHeight = p->dstPtr.ysize;
  }
  d.srcXInBytes = p->srcPos.x * srcElement;
  d.srcY = p->srcPos.y;
  d.srcZ = p->srcPos.z;
  d.dstXInBytes = p->dstPos.x * dstElement;
  d.dstY = p->dstPos.y;
  d.dstZ = p->dstPos.z;
  if (__builtin_mul_overflow(p->extent.width, unit, &d.WidthInBytes)) return CUDA_ERROR_INVALID_VALUE;
  d.Height = p->extent.height;
  d.Depth = p->extent.depth;
  return copy3D(d, stream, sync);
}

CUDA_MEMCPY3D fromDescriptor2D(const CUDA_MEMCPY2D& p) {
  CUDA_MEMCPY3D d{};
  d.srcMemoryType = p.srcMemoryType;
  d.srcHost = p.srcHost;
  d.srcDevice = p.srcDevice;
  d.srcArray = p.srcArray;
  d.srcXInBytes = p.srcXInBytes;
  d.srcY = p.srcY;
  d.srcPitch = p.srcPitch;
  d.srcHeight = p.Height;
  d.dstMemoryType = p.dstMemoryType;
  d.dstHost = p.dstHost;
  d.dstDevice = p.dstDevice;
  d.dstArray = p.dstArray;
  d.dstXInBytes = p.dstXInBytes;
  d.dstY = p.dstY;
  d.dstPitch = p.dstPitch;
  d.dstHeight = p.Height;
  d.WidthInBytes = p.WidthInBytes;
  d.Height = p.Height;
  d.Depth = 1;
  return d;
}

// cuMemcpyHtoA and its relatives: one row of a 1D array (offsets in bytes).
CUresult oneRow(CUmemorytype srcType, const void* srcHost, CUdeviceptr srcDevice, CUarray srcArray, size_t srcOffset,
                CUmemorytype dstType, void* dstHost, CUdeviceptr dstDevice, CUarray dstArray, size_t dstOffset,
                size_t count, CUstream stream, bool sync) {
  CUDA_MEMCPY3D d{};
  d.srcMemoryType = srcType;
  d.srcHost = srcHost;
  d.srcDevice = srcDevice;
  d.srcArray = srcArray;
  d.srcXInBytes = srcOffset;
  d.dstMemoryType = dstType;
  d.dstHost = dstHost;
  d.dstDevice = dstDevice;
  d.dstArray = dstArray;
  d.dstXInBytes = dstOffset;
  d.WidthInBytes = count;
  d.Height = 1;
  d.Depth = 1;
  return copy3D(d, stream, sync);
}

}  // namespace

namespace tally::client {

// memory.cc's cuMemcpy2D family, when a side is an array.
CUresult copy2DWithArray(const CUDA_MEMCPY2D& p, CUstream stream, bool sync) {
  return copy3D(fromDescriptor2D(p), stream, sync);
}

}  // namespace tally::client

// --- runtime: arrays -------------------------------------------------------------------------------

TALLY_API cudaError_t cudaMallocArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, size_t width,
                                      size_t height, unsigned int flags) {
  return guardRuntime(__func__, [&] {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    if (CUresult r = runtimeDescriptor(desc, cudaExtent{width, height, 0}, flags, d); r != CUDA_SUCCESS) return r;
    return createArray(d, reinterpret_cast<void**>(array));
  });
}

TALLY_API cudaError_t cudaMalloc3DArray(cudaArray_t* array, const cudaChannelFormatDesc* desc, cudaExtent extent,
                                        unsigned int flags) {
  return guardRuntime(__func__, [&] {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    if (CUresult r = runtimeDescriptor(desc, extent, flags, d); r != CUDA_SUCCESS) return r;
    return createArray(d, reinterpret_cast<void**>(array));
  });
}

TALLY_API cudaError_t cudaFreeArray(cudaArray_t array) {
  return guardRuntime(__func__, [&] { return array == nullptr ? rt().ready() : destroyArray(array); });
}

TALLY_API cudaError_t cudaArrayGetInfo(cudaChannelFormatDesc* desc, cudaExtent* extent, unsigned int* flags,
                                       cudaArray_t array) {
  return guardRuntime(__func__, [&] {
    const ArrayHandle* a = asArray(array);
    if (a == nullptr) return static_cast<CUresult>(cudaErrorInvalidResourceHandle);
    if (desc != nullptr) *desc = channelDescOf(a->descriptor.Format, a->descriptor.NumChannels);
    if (extent != nullptr) *extent = cudaExtent{a->descriptor.Width, a->descriptor.Height, a->descriptor.Depth};
    if (flags != nullptr) *flags = a->descriptor.Flags;
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaGetChannelDesc(cudaChannelFormatDesc* desc, cudaArray_const_t array) {
  return guardRuntime(__func__, [&] {
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const ArrayHandle* a = asArray(array);
    if (a == nullptr) return static_cast<CUresult>(cudaErrorInvalidResourceHandle);
    *desc = channelDescOf(a->descriptor.Format, a->descriptor.NumChannels);
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}

TALLY_API cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t* mipmapped, const cudaChannelFormatDesc* desc,
                                               cudaExtent extent, unsigned int numLevels, unsigned int flags) {
  return guardRuntime(__func__, [&] {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    if (CUresult r = runtimeDescriptor(desc, extent, flags, d); r != CUDA_SUCCESS) return r;
    return createMipmapped(d, numLevels, reinterpret_cast<void**>(mipmapped));
  });
}

TALLY_API cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t* array, cudaMipmappedArray_const_t mipmapped,
                                                 unsigned int level) {
  return guardRuntime(__func__, [&] {
    CUresult r = mipmappedLevel(mipmapped, level, reinterpret_cast<void**>(array));
    return r == CUDA_ERROR_INVALID_HANDLE ? static_cast<CUresult>(cudaErrorInvalidResourceHandle) : r;
  });
}

TALLY_API cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmapped) {
  return guardRuntime(__func__, [&] { return mipmapped == nullptr ? rt().ready() : destroyMipmapped(mipmapped); });
}

// --- runtime: copies ---------------------------------------------------------------------------

TALLY_API cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                          size_t spitch, size_t width, size_t height, cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] { return toArray2D(dst, wOffset, hOffset, src, spitch, width, height, kind, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                               size_t spitch, size_t width, size_t height, cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return toArray2D(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, false); });
}

TALLY_API cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                            size_t hOffset, size_t width, size_t height, cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] { return fromArray2D(dst, dpitch, src, wOffset, hOffset, width, height, kind, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpy2DFromArrayAsync(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                                 size_t hOffset, size_t width, size_t height, cudaMemcpyKind kind,
                                                 cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return fromArray2D(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, false); });
}

TALLY_API cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                               cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc,
                                               size_t width, size_t height, cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] {
    if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault) return kInvalidDirection;
    CUDA_MEMCPY3D p{};
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    p.srcArray = reinterpret_cast<CUarray>(const_cast<cudaArray*>(src));
    p.dstArray = reinterpret_cast<CUarray>(dst);
    p.srcXInBytes = wOffsetSrc;
    p.srcY = hOffsetSrc;
    p.dstXInBytes = wOffsetDst;
    p.dstY = hOffsetDst;
    p.WidthInBytes = width;
    p.Height = height;
    p.Depth = 1;
    return copy3D(p, nullptr, true);
  });
}

TALLY_API cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                        cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] { return toArrayLinear(dst, wOffset, hOffset, src, count, kind, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                             size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return toArrayLinear(dst, wOffset, hOffset, src, count, kind, stream, false); });
}

TALLY_API cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                          size_t count, cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] { return fromArrayLinear(dst, src, wOffset, hOffset, count, kind, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                               size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return fromArrayLinear(dst, src, wOffset, hOffset, count, kind, stream, false); });
}

TALLY_API cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
  return guardRuntime(__func__, [&] { return runtimeCopy3D(p, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return runtimeCopy3D(p, stream, false); });
}

// --- driver ----------------------------------------------------------------------------------------

TALLY_API CUresult cuArrayCreate(CUarray* array, const CUDA_ARRAY_DESCRIPTOR* desc) {
  return guardDriver(__func__, [&] {
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d{};
    d.Width = desc->Width;
    d.Height = desc->Height;
    d.Format = desc->Format;
    d.NumChannels = desc->NumChannels;
    return createArray(d, reinterpret_cast<void**>(array));
  });
}

TALLY_API CUresult cuArray3DCreate(CUarray* array, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  return guardDriver(__func__, [&] {
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return createArray(*desc, reinterpret_cast<void**>(array));
  });
}

TALLY_API CUresult cuArrayDestroy(CUarray array) {
  return guardDriver(__func__, [&] { return destroyArray(array); });
}

TALLY_API CUresult cuMipmappedArrayCreate(CUmipmappedArray* mipmapped, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                          unsigned int numLevels) {
  return guardDriver(__func__, [&] {
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return createMipmapped(*desc, numLevels, reinterpret_cast<void**>(mipmapped));
  });
}

TALLY_API CUresult cuMipmappedArrayGetLevel(CUarray* array, CUmipmappedArray mipmapped, unsigned int level) {
  return guardDriver(__func__, [&] { return mipmappedLevel(mipmapped, level, reinterpret_cast<void**>(array)); });
}

TALLY_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray mipmapped) {
  return guardDriver(__func__, [&] { return destroyMipmapped(mipmapped); });
}

TALLY_API CUresult cuArrayGetDescriptor(CUDA_ARRAY_DESCRIPTOR* desc, CUarray array) {
  return guardDriver(__func__, [&] {
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const ArrayHandle* a = asArray(array);
    if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    desc->Width = a->descriptor.Width;
    desc->Height = a->descriptor.Height;
    desc->Format = a->descriptor.Format;
    desc->NumChannels = a->descriptor.NumChannels;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuArray3DGetDescriptor(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray array) {
  return guardDriver(__func__, [&] {
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const ArrayHandle* a = asArray(array);
    if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *desc = a->descriptor;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuMemcpy3D(const CUDA_MEMCPY3D* p) {
  return guardDriver(__func__, [&] { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : copy3D(*p, nullptr, true); });
}

TALLY_API CUresult cuMemcpy3DAsync(const CUDA_MEMCPY3D* p, CUstream stream) {
  return guardDriver(__func__, [&] { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : copy3D(*p, stream, false); });
}

// Peer 3D copies: with unified addressing the pointers and arrays name their devices, so these
// are the plain 3D copies once the devices (runtime) or contexts (driver) are valid.
CUresult peerCopy3D(const cudaMemcpy3DPeerParms* p, CUstream stream, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int devices = rt().deviceCount();
  if (p->srcDevice < 0 || p->dstDevice < 0 || p->srcDevice >= devices || p->dstDevice >= devices) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  cudaMemcpy3DParms plain{};
  plain.srcArray = p->srcArray;
  plain.srcPos = p->srcPos;
  plain.srcPtr = p->srcPtr;
  plain.dstArray = p->dstArray;
  plain.dstPos = p->dstPos;
  plain.dstPtr = p->dstPtr;
  plain.extent = p->extent;
  plain.kind = cudaMemcpyDefault;
  return runtimeCopy3D(&plain, stream, sync);
}

CUresult peerCopy3D(const CUDA_MEMCPY3D_PEER* p, CUstream stream, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto needsContext = [](CUmemorytype type, CUcontext context) { return type != CU_MEMORYTYPE_ARRAY && context == nullptr; };
  if (needsContext(p->srcMemoryType, p->srcContext) || needsContext(p->dstMemoryType, p->dstContext)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  CUDA_MEMCPY3D plain{};
  plain.srcXInBytes = p->srcXInBytes, plain.srcY = p->srcY, plain.srcZ = p->srcZ, plain.srcLOD = p->srcLOD;
  plain.srcMemoryType = p->srcMemoryType, plain.srcHost = p->srcHost, plain.srcDevice = p->srcDevice;
  plain.srcArray = p->srcArray, plain.srcPitch = p->srcPitch, plain.srcHeight = p->srcHeight;
  plain.dstXInBytes = p->dstXInBytes, plain.dstY = p->dstY, plain.dstZ = p->dstZ, plain.dstLOD = p->dstLOD;
  plain.dstMemoryType = p->dstMemoryType, plain.dstHost = p->dstHost, plain.dstDevice = p->dstDevice;
  plain.dstArray = p->dstArray, plain.dstPitch = p->dstPitch, plain.dstHeight = p->dstHeight;
  plain.WidthInBytes = p->WidthInBytes, plain.Height = p->Height, plain.Depth = p->Depth;
  return copy3D(plain, stream, sync);
}

TALLY_API cudaError_t cudaMemcpy3DPeer(const cudaMemcpy3DPeerParms* p) {
  return guardRuntime(__func__, [&] { return peerCopy3D(p, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return peerCopy3D(p, stream, false); });
}

TALLY_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  return guardDriver(__func__, [&] { return peerCopy3D(p, nullptr, true); });
}

TALLY_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream stream) {
  return guardDriver(__func__, [&] { return peerCopy3D(p, stream, false); });
}

TALLY_API CUresult cuMemcpyHtoA(CUarray dst, size_t dstOffset, const void* src, size_t count) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, dstOffset, count,
                  nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyHtoAAsync(CUarray dst, size_t dstOffset, const void* src, size_t count, CUstream stream) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_HOST, src, 0, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, dstOffset, count,
                  stream, false);
  });
}

TALLY_API CUresult cuMemcpyAtoH(void* dst, CUarray src, size_t srcOffset, size_t count) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_ARRAY, nullptr, 0, src, srcOffset, CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, count,
                  nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyAtoHAsync(void* dst, CUarray src, size_t srcOffset, size_t count, CUstream stream) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_ARRAY, nullptr, 0, src, srcOffset, CU_MEMORYTYPE_HOST, dst, 0, nullptr, 0, count,
                  stream, false);
  });
}

TALLY_API CUresult cuMemcpyDtoA(CUarray dst, size_t dstOffset, CUdeviceptr src, size_t count) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr, 0, CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, dstOffset,
                  count, nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyAtoD(CUdeviceptr dst, CUarray src, size_t srcOffset, size_t count) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_ARRAY, nullptr, 0, src, srcOffset, CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr, 0,
                  count, nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyAtoA(CUarray dst, size_t dstOffset, CUarray src, size_t srcOffset, size_t count) {
  return guardDriver(__func__, [&] {
    return oneRow(CU_MEMORYTYPE_ARRAY, nullptr, 0, src, srcOffset, CU_MEMORYTYPE_ARRAY, nullptr, 0, dst, dstOffset,
                  count, nullptr, true);
  });
}
