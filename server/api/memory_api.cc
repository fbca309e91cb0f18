// Memory family: allocation, copies in every direction, memset, host memory shared by memfd.
// Every device address is checked against the tenant's table before anything runs.
#include "server/api/call_context.h"
#include "server/api/request_checks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

namespace tally::server::api {

namespace {

// A copy as the client asked for it: `height` rows of `width` bytes, each side's pitch resolved
// (0 on the wire: packed). `bytes` is width * height, checked not to wrap.
struct CopyShape {
  size_t width;
  size_t height;
  size_t srcPitch;
  size_t dstPitch;
  size_t bytes;
  PitchedRegion source() const { return {width, height, srcPitch}; }
  PitchedRegion destination() const { return {width, height, dstPitch}; }
};

CUDA_MEMCPY2D shape2D(const CopyShape& shape) {
  CUDA_MEMCPY2D p{};
  p.WidthInBytes = shape.width;
  p.Height = shape.height;
  p.srcPitch = shape.srcPitch;
  p.dstPitch = shape.dstPitch;
  return p;
}

// `p` narrowed to one piece: its rows and columns, the device side moved to where they start.
CUDA_MEMCPY2D narrowed(CUDA_MEMCPY2D p, const CopyPiece& piece) {
  p.WidthInBytes = piece.rowBytes;
  p.Height = piece.rows;
  if (p.srcMemoryType == CU_MEMORYTYPE_DEVICE) p.srcDevice += piece.row * p.srcPitch + piece.column;
  if (p.dstMemoryType == CU_MEMORYTYPE_DEVICE) p.dstDevice += piece.row * p.dstPitch + piece.column;
  return p;
}

// A copy of one row goes through the driver's 1-D calls: a cheaper submission than the 2-D one,
// which matters on the high-priority path (small input and output copies of every request).
CUresult copyAsync(const CUDA_MEMCPY2D& p, CUstream stream) {
  if (p.Height == 1 && p.srcY == 0 && p.dstY == 0) {
    if (p.srcMemoryType == CU_MEMORYTYPE_HOST && p.dstMemoryType == CU_MEMORYTYPE_DEVICE) {
      return cuMemcpyHtoDAsync(p.dstDevice + p.dstXInBytes, static_cast<const char*>(p.srcHost) + p.srcXInBytes,
                               p.WidthInBytes, stream);
    }
    if (p.srcMemoryType == CU_MEMORYTYPE_DEVICE && p.dstMemoryType == CU_MEMORYTYPE_HOST) {
      return cuMemcpyDtoHAsync(static_cast<char*>(p.dstHost) + p.dstXInBytes, p.srcDevice + p.srcXInBytes,
                               p.WidthInBytes, stream);
    }
  }
  return cuMemcpy2DAsync(&p, stream);
}

// How much of a copy goes through one staging buffer: whatever the tenant's budget can grant.
std::vector<CopyPiece> stagingPieces(CallContext& ctx, const CopyShape& shape) {
  return splitIntoPieces(shape.width, shape.height, gpu::StagingPool::pieceLimit(ctx.tenant().stagingBudget().get()));
}

// The client's mapped host memory for a region of it (nullptr: not inside one mapping).
void* mappedHostRegion(CallContext& ctx, uint64_t clientAddress, const PitchedRegion& region) {
  std::optional<uint64_t> extent = regionExtent(region);
  return extent ? ctx.tenant().hostMappings().hostAddress(clientAddress, *extent) : nullptr;
}

}  // namespace

// Whether `bytes` more device memory keeps the tenant within its quota, counting what its
// context limits (device heap, printf buffer) reserve; Tenant's own check counts allocations only.
bool quotaAllows(CallContext& ctx, size_t bytes) {
  session::Tenant& t = ctx.tenant();
  uint64_t used = 0;
  if (__builtin_add_overflow(t.memory().allocatedBytes(), contextLimitCharge(t.requestedLimits()), &used)) return false;
  if (session::withinQuota(used, bytes, t.limits().memoryQuotaBytes)) return true;
  spdlog::warn("tenant {} ({}): allocation of {} bytes refused: {} bytes allocated or reserved by context limits, "
               "quota {}", t.id(), t.name(), bytes, used, t.limits().memoryQuotaBytes);
  return false;
}

namespace {

void allocate(CallContext& ctx, wire::MemAlloc::Reader args) {
  CUdeviceptr ptr = 0;
  if (args.getPitchWidth() != 0) {
    if (!quotaAllows(ctx, session::pitchedBytesUpperBound(args.getPitchWidth(), args.getPitchHeight()))) {
      return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
    }
    size_t pitch = 0;
    CUresult r = ctx.tenant().allocatePitch(args.getDevice(), args.getPitchWidth(), args.getPitchHeight(), ptr, pitch);
    ctx.finish(r, [&](wire::Reply::Builder reply) {
      reply.initMemInfo().setFree(ptr);  // (address, pitch) ride in MemInfo's two fields
      reply.getMemInfo().setTotal(pitch);
    });
    return;
  }
  if (!quotaAllows(ctx, args.getSize())) return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
  CUresult r = ctx.tenant().allocate(args.getDevice(), args.getSize(), ptr);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(ptr); });
}

// Keeps `staging` until the copies queued so far on `stream` are done (no notice to the client).
CUresult keepUntilDone(gpu::Gpu& g, CUstream stream, std::shared_ptr<gpu::StagingBuffer> staging) {
  return g.completions().watchStream(stream, [staging = std::move(staging)](CUresult) {});
}

// Host-to-device from the frame's bulk bytes (packed rows), piece by piece through staging, so
// that one call never pins more than the tenant's budget. The bulk is checked to hold the whole
// copy before any staging is taken.
void hostToDeviceFromBulk(CallContext& ctx, gpu::Gpu& g, session::StreamState& s, CUDA_MEMCPY2D p,
                          const CopyShape& shape) {
  if (shape.bytes > ctx.bulkLeft()) {
    return ctx.protocolError(fmt::format("memcpy host to device of {} bytes to 0x{:x}, but the frame carries {} bulk "
                                         "bytes", shape.bytes, p.dstDevice, ctx.bulkLeft()));
  }
  if (shape.bytes == 0) return ctx.finish(CUDA_SUCCESS);
  std::vector<CopyPiece> pieces = stagingPieces(ctx, shape);
  size_t consumed = 0;
  std::shared_ptr<gpu::StagingBuffer> staging;
  auto refuseRest = [&](CUresult r) {
    if (ctx.skipBulk(shape.bytes - consumed)) ctx.finish(r);
  };
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (staging) {
      if (CUresult r = keepUntilDone(g, s.stream, std::move(staging)); r != CUDA_SUCCESS) return refuseRest(r);
    }
    staging = g.staging().take(pieces[i].bytes(), ctx.tenant().stagingBudget());
    if (!staging) return refuseRest(CUDA_ERROR_OUT_OF_MEMORY);
    if (!ctx.readBulk(staging->data(), pieces[i].bytes())) return;
    consumed += pieces[i].bytes();
    CUDA_MEMCPY2D piece = narrowed(p, pieces[i]);
    piece.srcHost = staging->data();
    piece.srcPitch = pieces[i].rowBytes;  // bulk rows are packed
    if (CUresult r = cuMemcpy2DAsync(&piece, s.stream); r != CUDA_SUCCESS) return refuseRest(r);
  }
  replyWhenDone(ctx, g, s.stream, staging);
}

void hostToDevice(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                  const CopyShape& shape) {
  CUDA_MEMCPY2D p = shape2D(shape);
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = args.getDst();
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  if (!args.getHostShared()) return hostToDeviceFromBulk(ctx, g, s, p, shape);
  p.srcHost = mappedHostRegion(ctx, args.getSrc(), shape.source());
  if (p.srcHost == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUresult r = copyAsync(p, s.stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, g, s.stream, {}, shape.bytes);
}

void deviceToHostShared(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                        CUDA_MEMCPY2D p, const CopyShape& shape) {
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.dstHost = mappedHostRegion(ctx, args.getDst(), shape.destination());
  if (p.dstHost == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUresult r = copyAsync(p, s.stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, g, s.stream, {}, shape.bytes);
}

// One piece of a device-to-host copy: `p` (already narrowed to the piece) goes to a staging
// buffer, then to the client as HostData at `offset` of its destination.
CUresult deviceToHostChunk(CallContext& ctx, gpu::Gpu& g, session::StreamState& s, CUDA_MEMCPY2D p,
                           uint64_t offset, uint64_t token, bool last) {
  size_t bytes = p.WidthInBytes * p.Height;
  auto staging = g.staging().take(bytes, ctx.tenant().stagingBudget());
  if (!staging) return CUDA_ERROR_OUT_OF_MEMORY;
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.dstHost = staging->data();
  p.dstPitch = p.WidthInBytes;
  CUresult r = p.Height == 1 ? cuMemcpyDtoHAsync(p.dstHost, p.srcDevice, p.WidthInBytes, s.stream)
                              : cuMemcpy2DAsync(&p, s.stream);
  if (r != CUDA_SUCCESS) return r;
  return sendStagedPiece(ctx, g, s.stream, std::move(staging), token, offset, bytes, last,
                         last && offset == 0 && !ctx.oneWay());
}

// Device-to-host through staging, piece by piece (whole rows, or parts of a wide row), each
// sent as HostData at its offset in the client's packed destination.
void deviceToHost(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                  const CopyShape& shape) {
  CUDA_MEMCPY2D p = shape2D(shape);
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = args.getSrc();
  if (args.getHostShared()) return deviceToHostShared(ctx, args, g, s, p, shape);
  if (shape.bytes == 0) return ctx.finish(CUDA_SUCCESS);
  std::vector<CopyPiece> pieces = stagingPieces(ctx, shape);
  for (size_t i = 0; i < pieces.size(); ++i) {
    CUresult r = deviceToHostChunk(ctx, g, s, narrowed(p, pieces[i]), pieces[i].packedOffset(shape.width),
                                   args.getToken(), i + 1 == pieces.size());
    if (r != CUDA_SUCCESS) return ctx.finish(r);
  }
}

void deviceToDevice(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                    const CopyShape& shape) {
  CUDA_MEMCPY2D p = shape2D(shape);
  p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = args.getSrc();
  p.dstDevice = args.getDst();
  std::optional<uint64_t> sourceExtent = regionExtent(shape.source());
  if (!sourceExtent || ctx.tenant().memory().ownerOf(p.srcDevice, *sourceExtent) == nullptr) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  CUresult r = shape.height == 1 ? cuMemcpyDtoDAsync(p.dstDevice, p.srcDevice, shape.width, s.stream)
                                 : cuMemcpy2DAsync(&p, s.stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, g, s.stream);
}

// The GPU whose memory holds the copy's device side (the destination unless it goes to the
// host), if the tenant owns all of it and the region is well formed; else nullptr.
gpu::Gpu* deviceSideOwner(CallContext& ctx, wire::Memcpy::Reader args, const CopyShape& shape) {
  bool toDevice = args.getKind() != wire::CopyKind::DEVICE_TO_HOST;
  std::optional<uint64_t> extent = regionExtent(toDevice ? shape.destination() : shape.source());
  if (!extent) return nullptr;
  return ctx.tenant().memory().ownerOf(toDevice ? args.getDst() : args.getSrc(), *extent);
}

void copy(CallContext& ctx, wire::Memcpy::Reader args) {
  uint64_t height = std::max<uint64_t>(args.getHeight(), 1);
  std::optional<uint64_t> bytes = checkedProduct(args.getWidth(), height);
  if (!bytes) return ctx.protocolError(fmt::format("memcpy of {} rows of {} bytes overflows", height, args.getWidth()));
  CopyShape shape{args.getWidth(), height, pitchOr(args.getSrcPitch(), args.getWidth()),
                  pitchOr(args.getDstPitch(), args.getWidth()), *bytes};
  // Nothing to copy, as natively; never handed to the driver, whose row loop would still run
  // (fuzzer finding: width 0 with 2^47 rows kept a session thread busy for minutes).
  if (shape.bytes == 0) return ctx.finish(CUDA_SUCCESS);
  // Bulk that arrived for a refused copy must still be consumed to keep the stream framed.
  auto refuse = [&](CUresult r) {
    bool bulkFollows = args.getKind() == wire::CopyKind::HOST_TO_DEVICE && !args.getHostShared();
    if (bulkFollows && !ctx.skipBulk(shape.bytes)) return;
    ctx.finish(r);
  };
  gpu::Gpu* g = deviceSideOwner(ctx, args, shape);
  if (g == nullptr) {
    const bool toDevice = args.getKind() != wire::CopyKind::DEVICE_TO_HOST;
    spdlog::info("tenant {} ({}): copy of {} bytes {} {:#x} refused: not the tenant's device memory", ctx.tenant().id(),
                 ctx.tenant().name(), shape.bytes, toDevice ? "to" : "from", toDevice ? args.getDst() : args.getSrc());
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return refuse(CUDA_ERROR_INVALID_HANDLE);
  // A captured copy through staging would read or write the pooled buffer on every replay, long
  // after it went back to the pool (and to other tenants): as natively for pageable memory, the
  // copy is refused and the capture invalidated.
  if (!args.getHostShared() && args.getKind() != wire::CopyKind::DEVICE_TO_DEVICE) {
    if (CUresult r = captureConflict(ctx, s->stream); r != CUDA_SUCCESS) return refuse(r);
  }
  switch (args.getKind()) {
    case wire::CopyKind::HOST_TO_DEVICE: return hostToDevice(ctx, args, *g, *s, shape);
    case wire::CopyKind::DEVICE_TO_HOST: return deviceToHost(ctx, args, *g, *s, shape);
    case wire::CopyKind::DEVICE_TO_DEVICE: return deviceToDevice(ctx, args, *g, *s, shape);
  }
}

CUresult memsetAsync(const wire::Memset::Reader& args, CUdeviceptr dst, size_t pitch, size_t height, CUstream stream) {
  size_t width = args.getWidth();
  uint32_t value = args.getValue();
  switch (args.getElementSize()) {
    case 2:
      return height == 1 ? cuMemsetD16Async(dst, static_cast<uint16_t>(value), width, stream)
                         : cuMemsetD2D16Async(dst, pitch, static_cast<uint16_t>(value), width, height, stream);
    case 4:
      return height == 1 ? cuMemsetD32Async(dst, value, width, stream)
                         : cuMemsetD2D32Async(dst, pitch, value, width, height, stream);
    default:
      return height == 1 ? cuMemsetD8Async(dst, static_cast<uint8_t>(value), width, stream)
                         : cuMemsetD2D8Async(dst, pitch, static_cast<uint8_t>(value), width, height, stream);
  }
}

// The rows a memset writes: `width` elements of `elementSize` bytes per row; nullopt when the
// element size is not one the driver has, or the row's bytes wrap.
std::optional<PitchedRegion> memsetRegion(wire::Memset::Reader args) {
  size_t elementSize = std::max<size_t>(args.getElementSize(), 1);
  if (elementSize != 1 && elementSize != 2 && elementSize != 4) return std::nullopt;
  std::optional<uint64_t> rowBytes = checkedProduct(args.getWidth(), elementSize);
  if (!rowBytes) return std::nullopt;
  return PitchedRegion{*rowBytes, std::max<uint64_t>(args.getHeight(), 1), pitchOr(args.getPitch(), *rowBytes)};
}

void set(CallContext& ctx, wire::Memset::Reader args) {
  if (args.getWidth() == 0) return ctx.finish(CUDA_SUCCESS);  // nothing to set (see copy)
  std::optional<PitchedRegion> region = memsetRegion(args);
  std::optional<uint64_t> extent = region ? regionExtent(*region) : std::nullopt;
  gpu::Gpu* g = extent ? ctx.tenant().memory().ownerOf(args.getDst(), *extent) : nullptr;
  CUdeviceptr dst = args.getDst();
  // Pinned memory the tenant shares with tallyd is addressed by the client's pointer (unified
  // addressing: XLA's autotuner sets such words); the GPU writes it where tallyd mapped it.
  CUdeviceptr hostShared = g == nullptr && extent ? ctx.tenant().hostMappings().deviceAddress(dst, *extent) : 0;
  if (g == nullptr && hostShared == 0) {
    spdlog::info("tenant {} ({}): memset of {} bytes at {:#x} (element size {}) refused: not the tenant's memory",
                 ctx.tenant().id(), ctx.tenant().name(), extent.value_or(0), args.getDst(), args.getElementSize());
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (hostShared != 0) {
    g = s->gpu;
    dst = hostShared;
  }
  CUresult r = memsetAsync(args, dst, region->pitch, region->height, s->stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, *g, s->stream);
}

void memGetInfo(CallContext& ctx, wire::MemGetInfo::Reader args) {
  gpu::Gpu* g = ctx.tenant().gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  g->makeCurrent();
  size_t free = 0, total = 0;
  CUresult r = cuMemGetInfo(&free, &total);
  // What the pool keeps mapped for reuse is free to the tenant too.
  if (g->memoryPool() != nullptr) free = std::min(total, free + g->memoryPool()->idleBytes());
  ctx.finish(r, [&](wire::Reply::Builder reply) {
    auto info = reply.initMemInfo();
    info.setFree(free);
    info.setTotal(total);
  });
}

void hostRegister(CallContext& ctx, wire::HostRegister::Reader args) {
  int fd = ctx.takeFd();
  if (fd < 0) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  gpu::Gpu* g = ctx.tenant().gpu(0);
  uint64_t deviceAddress = 0;
  CUresult r = g == nullptr ? CUDA_ERROR_NO_DEVICE
                            : ctx.tenant().hostMappings().map(fd, args.getClientAddress(), args.getSize(), g, deviceAddress);
  ::close(fd);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(deviceAddress); });
}

// Replies once the memory is gone, i.e. after the tenant's earlier work: cudaFree's own promise.
void freeMemory(CallContext& ctx, uint64_t ptr) {
  gpu::Gpu* on = nullptr;
  if (CUresult r = ctx.tenant().free(ptr, on); r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, *on, ctx.tenant().streams().syncStream(on));
}

}  // namespace

void handleMemory(CallContext& ctx, wire::Call::Reader call) {
  switch (call.which()) {
    case wire::Call::MEM_ALLOC: return allocate(ctx, call.getMemAlloc());
    case wire::Call::MEM_FREE: return freeMemory(ctx, call.getMemFree().getPtr());
    case wire::Call::MEMCPY: return copy(ctx, call.getMemcpy());
    case wire::Call::MEMSET: return set(ctx, call.getMemset());
    case wire::Call::MEM_GET_INFO: return memGetInfo(ctx, call.getMemGetInfo());
    case wire::Call::HOST_REGISTER: return hostRegister(ctx, call.getHostRegister());
    case wire::Call::HOST_UNREGISTER:
      return ctx.finish(ctx.tenant().hostMappings().unmap(call.getHostUnregister().getClientAddress()));
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
