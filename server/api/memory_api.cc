// Memory family: allocation, copies in every direction, memset, host memory shared by memfd.
// Every device address is checked against the tenant's table before anything runs.
#include "server/api/call_context.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

namespace tally::server::api {

namespace {

// Device-to-host bulk is sent in pieces so the client can start writing early and staging
// stays bounded.
constexpr size_t kD2HChunk = 16 << 20;

struct CopyShape {
  size_t width;
  size_t height;
  size_t bytes() const { return width * height; }
};

CUDA_MEMCPY2D shape2D(const CopyShape& shape) {
  CUDA_MEMCPY2D p{};
  p.WidthInBytes = shape.width;
  p.Height = shape.height;
  return p;
}

// Extent of a pitched region: the last row needs only `width` bytes.
size_t pitchedExtent(size_t pitch, const CopyShape& shape) {
  return shape.height == 0 ? 0 : pitch * (shape.height - 1) + shape.width;
}

void allocate(CallContext& ctx, wire::MemAlloc::Reader args) {
  CUdeviceptr ptr = 0;
  if (args.getPitchWidth() != 0) {
    size_t pitch = 0;
    CUresult r = ctx.tenant().allocatePitch(args.getDevice(), args.getPitchWidth(), args.getPitchHeight(), ptr, pitch);
    ctx.finish(r, [&](wire::Reply::Builder reply) {
      reply.initMemInfo().setFree(ptr);  // (address, pitch) ride in MemInfo's two fields
      reply.getMemInfo().setTotal(pitch);
    });
    return;
  }
  CUresult r = ctx.tenant().allocate(args.getDevice(), args.getSize(), ptr);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(ptr); });
}

void hostToDevice(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                  const CopyShape& shape) {
  CUDA_MEMCPY2D p = shape2D(shape);
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = args.getDst();
  p.dstPitch = args.getDstPitch() != 0 ? args.getDstPitch() : shape.width;
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcPitch = args.getSrcPitch() != 0 ? args.getSrcPitch() : shape.width;
  std::shared_ptr<gpu::StagingBuffer> staging;
  if (args.getHostShared()) {
    p.srcHost = ctx.tenant().hostAddress(args.getSrc(), pitchedExtent(p.srcPitch, shape));
    if (p.srcHost == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  } else {
    p.srcPitch = shape.width;  // bulk rows are packed
    staging = g.staging().take(shape.bytes(), ctx.tenant().stagingBudget());
    if (!staging) {
      if (ctx.skipBulk(shape.bytes())) ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
      return;
    }
    if (!ctx.readBulk(staging->data(), shape.bytes())) return;
    p.srcHost = staging->data();
  }
  CUresult r = cuMemcpy2DAsync(&p, s.stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, g, s.stream, staging);
}

void deviceToHostShared(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                        CUDA_MEMCPY2D p, const CopyShape& shape) {
  p.dstMemoryType = CU_MEMORYTYPE_HOST;
  p.dstPitch = args.getDstPitch() != 0 ? args.getDstPitch() : shape.width;
  p.dstHost = ctx.tenant().hostAddress(args.getDst(), pitchedExtent(p.dstPitch, shape));
  if (p.dstHost == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CUresult r = cuMemcpy2DAsync(&p, s.stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, g, s.stream);
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
  if (last && offset == 0 && !ctx.oneWay()) {
    // The whole copy in one piece, waited for: the reply carries the bytes (one frame, one write).
    return afterStream(ctx, g, s.stream, [reply = ctx.replyLaterWithData(), staging, token, bytes](CUresult status) {
      std::vector<iovec> data;
      if (status == CUDA_SUCCESS) data.push_back(iovec{staging->data(), bytes});
      reply(status, std::move(data), status == CUDA_SUCCESS ? token : 0, staging);
    });
  }
  auto reply = last ? ctx.replyLater() : nullptr;
  return afterStream(ctx, g, s.stream, [outbox = ctx.outbox(), staging, token, offset, bytes, reply](CUresult status) {
    if (status == CUDA_SUCCESS) {
      capnp::MallocMessageBuilder message(64);
      auto data = message.initRoot<wire::ServerMessage>().initHostData();
      data.setToken(token);
      data.setOffset(offset);
      outbox->send(message, {iovec{staging->data(), bytes}}, staging);
    }
    if (reply) reply(status, {});
  });
}

void deviceToHost(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                  const CopyShape& shape) {
  CUDA_MEMCPY2D p = shape2D(shape);
  p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = args.getSrc();
  p.srcPitch = args.getSrcPitch() != 0 ? args.getSrcPitch() : shape.width;
  if (args.getHostShared()) return deviceToHostShared(ctx, args, g, s, p, shape);
  if (shape.bytes() == 0) return ctx.finish(CUDA_SUCCESS);
  if (shape.height == 1) {  // a flat copy: pieces of kD2HChunk bytes
    for (size_t done = 0; done < shape.width; done += kD2HChunk) {
      CUDA_MEMCPY2D piece = p;
      piece.WidthInBytes = std::min(kD2HChunk, shape.width - done);
      piece.srcDevice += done;
      bool last = done + piece.WidthInBytes >= shape.width;
      if (CUresult r = deviceToHostChunk(ctx, g, s, piece, done, args.getToken(), last); r != CUDA_SUCCESS) {
        return ctx.finish(r);
      }
    }
    return;
  }
  size_t rowsPerChunk = std::max<size_t>(1, kD2HChunk / std::max<size_t>(shape.width, 1));
  for (size_t row = 0; row < shape.height; row += rowsPerChunk) {
    CUDA_MEMCPY2D piece = p;
    piece.Height = std::min(rowsPerChunk, shape.height - row);
    piece.srcDevice += row * p.srcPitch;
    bool last = row + piece.Height >= shape.height;
    if (CUresult r = deviceToHostChunk(ctx, g, s, piece, row * shape.width, args.getToken(), last); r != CUDA_SUCCESS) {
      return ctx.finish(r);
    }
  }
}

void deviceToDevice(CallContext& ctx, wire::Memcpy::Reader args, gpu::Gpu& g, session::StreamState& s,
                    const CopyShape& shape) {
  CUDA_MEMCPY2D p = shape2D(shape);
  p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.srcDevice = args.getSrc();
  p.dstDevice = args.getDst();
  p.srcPitch = args.getSrcPitch() != 0 ? args.getSrcPitch() : shape.width;
  p.dstPitch = args.getDstPitch() != 0 ? args.getDstPitch() : shape.width;
  if (ctx.tenant().ownerOf(p.srcDevice, pitchedExtent(p.srcPitch, shape)) == nullptr) {
    return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  CUresult r = shape.height == 1 ? cuMemcpyDtoDAsync(p.dstDevice, p.srcDevice, shape.width, s.stream)
                                 : cuMemcpy2DAsync(&p, s.stream);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, g, s.stream);
}

void copy(CallContext& ctx, wire::Memcpy::Reader args) {
  CopyShape shape{args.getWidth(), std::max<uint64_t>(args.getHeight(), 1)};
  if (shape.width != 0 && shape.height > SIZE_MAX / shape.width) return ctx.protocolError("memcpy shape overflows");
  bool toDevice = args.getKind() != wire::CopyKind::DEVICE_TO_HOST;
  uint64_t devicePtr = toDevice ? args.getDst() : args.getSrc();
  uint64_t devicePitch = toDevice ? args.getDstPitch() : args.getSrcPitch();
  gpu::Gpu* g = ctx.tenant().ownerOf(devicePtr, pitchedExtent(devicePitch != 0 ? devicePitch : shape.width, shape));
  // Bulk that arrived for a refused copy must still be consumed to keep the stream framed.
  auto refuse = [&](CUresult r) {
    bool bulkFollows = args.getKind() == wire::CopyKind::HOST_TO_DEVICE && !args.getHostShared();
    if (bulkFollows && !ctx.skipBulk(shape.bytes())) return;
    ctx.finish(r);
  };
  if (g == nullptr) return refuse(CUDA_ERROR_INVALID_VALUE);
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return refuse(CUDA_ERROR_INVALID_HANDLE);
  switch (args.getKind()) {
    case wire::CopyKind::HOST_TO_DEVICE: return hostToDevice(ctx, args, *g, *s, shape);
    case wire::CopyKind::DEVICE_TO_HOST: return deviceToHost(ctx, args, *g, *s, shape);
    case wire::CopyKind::DEVICE_TO_DEVICE: return deviceToDevice(ctx, args, *g, *s, shape);
  }
}

CUresult memsetAsync(const wire::Memset::Reader& args, size_t pitch, size_t height, CUstream stream) {
  CUdeviceptr dst = args.getDst();
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

void set(CallContext& ctx, wire::Memset::Reader args) {
  size_t elementSize = std::max<size_t>(args.getElementSize(), 1);
  if (elementSize != 1 && elementSize != 2 && elementSize != 4) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  CopyShape shape{args.getWidth() * elementSize, std::max<uint64_t>(args.getHeight(), 1)};
  size_t pitch = args.getPitch() != 0 ? args.getPitch() : shape.width;
  gpu::Gpu* g = ctx.tenant().ownerOf(args.getDst(), pitchedExtent(pitch, shape));
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  CUresult r = memsetAsync(args, pitch, shape.height, s->stream);
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
                            : ctx.tenant().mapHostMemory(fd, args.getClientAddress(), args.getSize(), g, deviceAddress);
  ::close(fd);
  ctx.finish(r, [&](wire::Reply::Builder reply) { reply.setValue(deviceAddress); });
}

// Replies once the memory is gone, i.e. after the tenant's earlier work: cudaFree's own promise.
void freeMemory(CallContext& ctx, uint64_t ptr) {
  gpu::Gpu* on = nullptr;
  if (CUresult r = ctx.tenant().free(ptr, on); r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, *on, ctx.tenant().syncStream(on));
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
      return ctx.finish(ctx.tenant().unmapHostMemory(call.getHostUnregister().getClientAddress()));
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
