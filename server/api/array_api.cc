// CUDA arrays and mipmapped arrays, copies to, from and between them, texture and surface objects. Arrays are created
// with the driver in the shared context under the client's ids and counted against the tenant's
// memory quota; texture and surface objects are the driver's values, listed per tenant
// (session/array_table.h). Every device address a copy or an object names is checked to be the
// tenant's memory, every array id to be the tenant's array, and array regions to lie inside the
// array, before the driver sees them. Host bytes travel as bulk through staging, as for linear
// copies (memory_api.cc), or come from host memory shared with tallyd.
#include "server/api/call_context.h"
#include "server/api/request_checks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace tally::server::api {

namespace {

// Array flags tallyd forwards; sparse and deferred-mapping arrays have no memory of their own to
// count against a quota (their backing comes from cuMemMapArrayAsync, which is not forwarded).
constexpr unsigned kForwardedArrayFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                                          CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_DEPTH_TEXTURE |
                                          CUDA_ARRAY3D_COLOR_ATTACHMENT;

void refused(CallContext& ctx, const char* call, CUresult r, const std::string& why) {
  spdlog::warn("tenant {} ({}): {} refused ({}): {}", ctx.tenant().id(), ctx.tenant().name(), call,
               static_cast<int>(r), why);
  ctx.finish(r);
}

// --- arrays ------------------------------------------------------------------------------------

CUDA_ARRAY3D_DESCRIPTOR descriptorOf(wire::ArrayDescriptor::Reader w) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = w.getWidth();
  d.Height = w.getHeight();
  d.Depth = w.getDepth();
  d.Format = static_cast<CUarray_format>(w.getFormat());
  d.NumChannels = w.getNumChannels();
  d.Flags = w.getFlags();
  return d;
}

// The flags and format checks every array creation makes; CUDA_SUCCESS with `bytes` (level 0's)
// when the driver may be asked.
CUresult checkDescriptor(CallContext& ctx, const char* call, const CUDA_ARRAY3D_DESCRIPTOR& d, size_t& bytes) {
  if ((d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) != 0) {
    spdlog::warn("tenant {} ({}): {} refused: sparse and deferred-mapping arrays are not forwarded", ctx.tenant().id(),
                 ctx.tenant().name(), call);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if ((d.Flags & ~kForwardedArrayFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  bool unsupported = false;
  std::optional<size_t> size = session::arrayBytes(d, unsupported);
  if (!size) {
    if (!unsupported) return CUDA_ERROR_INVALID_VALUE;
    spdlog::warn("tenant {} ({}): {} refused: format 0x{:x} is not forwarded", ctx.tenant().id(), ctx.tenant().name(),
                 call, static_cast<unsigned>(d.Format));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  bytes = *size;
  return CUDA_SUCCESS;
}

void create(CallContext& ctx, wire::ArrayCreate::Reader args) {
  session::Tenant& t = ctx.tenant();
  gpu::Gpu* g = t.gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  const uint64_t id = args.getArray();
  if (id == 0 || t.arrays().containsId(id)) return refused(ctx, "cuArray3DCreate", CUDA_ERROR_INVALID_VALUE, "id in use");
  if (t.arrays().arrayCount() >= session::ArrayTable::kMaxArrays) {
    return refused(ctx, "cuArray3DCreate", CUDA_ERROR_OUT_OF_MEMORY, "too many arrays");
  }
  CUDA_ARRAY3D_DESCRIPTOR d = descriptorOf(args.getDescriptor());
  size_t size = 0;
  if (CUresult r = checkDescriptor(ctx, "cuArray3DCreate", d, size); r != CUDA_SUCCESS) return ctx.finish(r);
  if (!quotaAllows(ctx, size)) return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
  g->makeCurrent();
  session::ArrayState state;
  state.gpu = g;
  state.descriptor = d;
  state.bytes = size;
  if (CUresult r = cuArray3DCreate(&state.array, &d); r != CUDA_SUCCESS) return ctx.finish(r);
  t.memory().charge(size);
  t.arrays().add(id, state);
  ctx.finish(CUDA_SUCCESS);
}

void destroy(CallContext& ctx, uint64_t id) {
  bool known = false;
  std::optional<session::ArrayState> state = ctx.tenant().arrays().remove(id, known);
  if (!known) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (!state) return ctx.finish(CUDA_SUCCESS);  // retired: goes with the last object over it
  ctx.finish(ctx.tenant().destroyArray(*state));
}

// --- mipmapped arrays --------------------------------------------------------------------------

constexpr unsigned kMaxMipmapLevels = 32;  // more than any dimension the driver allows has

// The bytes of every level: each halves the dimensions it has (never below 1), layers stay.
std::optional<size_t> mipmappedBytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  bool layers = (d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  size_t total = 0;
  for (unsigned l = 0; l < levels; ++l) {
    CUDA_ARRAY3D_DESCRIPTOR level = d;
    level.Width = std::max<size_t>(d.Width >> l, 1);
    level.Height = d.Height == 0 ? 0 : std::max<size_t>(d.Height >> l, 1);
    level.Depth = d.Depth == 0 || layers ? d.Depth : std::max<size_t>(d.Depth >> l, 1);
    bool unsupported = false;
    std::optional<size_t> bytes = session::arrayBytes(level, unsupported);
    if (!bytes || __builtin_add_overflow(total, *bytes, &total)) return std::nullopt;
  }
  return total;
}

void createMipmapped(CallContext& ctx, wire::MipmappedArrayCreate::Reader args) {
  session::Tenant& t = ctx.tenant();
  gpu::Gpu* g = t.gpu(args.getDevice());
  if (g == nullptr) return ctx.finish(CUDA_ERROR_INVALID_DEVICE);
  const uint64_t id = args.getMipmappedArray();
  if (id == 0 || t.arrays().containsMipmapped(id)) {
    return refused(ctx, "cuMipmappedArrayCreate", CUDA_ERROR_INVALID_VALUE, "id in use");
  }
  if (t.arrays().mipmappedCount() >= session::ArrayTable::kMaxArrays) {
    return refused(ctx, "cuMipmappedArrayCreate", CUDA_ERROR_OUT_OF_MEMORY, "too many mipmapped arrays");
  }
  CUDA_ARRAY3D_DESCRIPTOR d = descriptorOf(args.getDescriptor());
  size_t levelZero = 0;
  if (CUresult r = checkDescriptor(ctx, "cuMipmappedArrayCreate", d, levelZero); r != CUDA_SUCCESS) return ctx.finish(r);
  const unsigned levels = args.getNumLevels();
  std::optional<size_t> bytes = levels >= 1 && levels <= kMaxMipmapLevels ? mipmappedBytes(d, levels) : std::nullopt;
  if (!bytes) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  if (!quotaAllows(ctx, *bytes)) return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
  g->makeCurrent();
  session::MipmappedState state;
  state.gpu = g;
  state.descriptor = d;
  state.levels = levels;
  state.bytes = *bytes;
  if (CUresult r = cuMipmappedArrayCreate(&state.array, &d, levels); r != CUDA_SUCCESS) return ctx.finish(r);
  t.memory().charge(*bytes);
  t.arrays().addMipmapped(id, state);
  ctx.finish(CUDA_SUCCESS);
}

// A level becomes an array entry under the client's id (its memory stays the mipmapped array's);
// the reply carries its descriptor.
void getLevel(CallContext& ctx, wire::MipmappedArrayGetLevel::Reader args) {
  session::ArrayTable& table = ctx.tenant().arrays();
  session::MipmappedState* m = table.findMipmapped(args.getMipmappedArray());
  if (m == nullptr) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  const uint64_t id = args.getArray();
  if (id == 0 || table.containsId(id)) return refused(ctx, "cuMipmappedArrayGetLevel", CUDA_ERROR_INVALID_VALUE, "id in use");
  if (table.arrayCount() >= session::ArrayTable::kMaxArrays) {
    return refused(ctx, "cuMipmappedArrayGetLevel", CUDA_ERROR_OUT_OF_MEMORY, "too many arrays");
  }
  if (args.getLevel() >= m->levels) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  m->gpu->makeCurrent();
  session::ArrayState level;
  level.gpu = m->gpu;
  level.mipmapped = args.getMipmappedArray();
  CUresult r = cuMipmappedArrayGetLevel(&level.array, m->array, args.getLevel());
  if (r == CUDA_SUCCESS) r = cuArray3DGetDescriptor(&level.descriptor, level.array);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  table.add(id, level);
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) {
    auto d = reply.initArrayDescriptor();
    d.setWidth(level.descriptor.Width);
    d.setHeight(level.descriptor.Height);
    d.setDepth(level.descriptor.Depth);
    d.setFormat(static_cast<uint32_t>(level.descriptor.Format));
    d.setNumChannels(level.descriptor.NumChannels);
    d.setFlags(level.descriptor.Flags);
  });
}

void destroyMipmapped(CallContext& ctx, uint64_t id) {
  bool known = false;
  std::optional<session::MipmappedState> state = ctx.tenant().arrays().removeMipmapped(id, known);
  if (!known) return ctx.finish(CUDA_ERROR_INVALID_HANDLE);
  if (!state) return ctx.finish(CUDA_SUCCESS);  // retired: goes with the last object over it
  ctx.finish(ctx.tenant().destroyMipmapped(*state));
}

// --- copies ------------------------------------------------------------------------------------

struct Extent {
  uint64_t width, height, depth, bytes;
};

// One side as the driver takes it, with the GPU whose memory it names (nullptr: host memory).
struct Side {
  CUmemorytype type = CU_MEMORYTYPE_HOST;
  const void* host = nullptr;
  CUdeviceptr device = 0;
  CUarray array = nullptr;
  size_t x = 0, y = 0, z = 0, pitch = 0, height = 0;
  gpu::Gpu* gpu = nullptr;
  bool bulk = false;
};

// The bytes a linear side touches from its first one: nullopt when they wrap or rows overlap.
std::optional<std::pair<uint64_t, uint64_t>> linearRange(wire::CopySide::Reader w, const Extent& e) {
  uint64_t pitch = w.getPitch(), rows = w.getHeight();
  if ((e.height > 1 || e.depth > 1) && (pitch < e.width || pitch > kMaxPitch)) return std::nullopt;
  if (e.depth > 1 && rows < e.height) return std::nullopt;
  uint64_t slice = 0, start = 0, extent = 0, part = 0;
  if (__builtin_mul_overflow(pitch, rows, &slice)) return std::nullopt;
  // start = x + y * pitch + z * slice
  if (__builtin_mul_overflow(w.getY(), pitch, &start) || __builtin_add_overflow(start, w.getXInBytes(), &start) ||
      __builtin_mul_overflow(w.getZ(), slice, &part) || __builtin_add_overflow(start, part, &start)) {
    return std::nullopt;
  }
  // extent = (depth - 1) * slice + (height - 1) * pitch + width
  if (__builtin_mul_overflow(e.depth - 1, slice, &extent) || __builtin_mul_overflow(e.height - 1, pitch, &part) ||
      __builtin_add_overflow(extent, part, &extent) || __builtin_add_overflow(extent, e.width, &extent)) {
    return std::nullopt;
  }
  return std::make_pair(start, extent);
}

bool inside(uint64_t offset, uint64_t size, uint64_t limit) {
  uint64_t end = 0;
  return !__builtin_add_overflow(offset, size, &end) && end <= limit;
}

CUresult resolveSide(CallContext& ctx, wire::CopySide::Reader w, const Extent& e, Side& out) {
  switch (w.which()) {
    case wire::CopySide::HOST:
      out.bulk = true;
      out.pitch = e.width;
      out.height = e.height;
      return CUDA_SUCCESS;
    case wire::CopySide::ARRAY: {
      session::ArrayState* a = ctx.tenant().arrays().find(w.getArray());
      if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
      const CUDA_ARRAY3D_DESCRIPTOR& d = a->descriptor;
      uint64_t rowBytes = session::arrayFormatBytes(d.Format) * d.NumChannels * d.Width;
      if (!inside(w.getXInBytes(), e.width, rowBytes) || !inside(w.getY(), e.height, std::max<uint64_t>(d.Height, 1)) ||
          !inside(w.getZ(), e.depth, std::max<uint64_t>(d.Depth, 1))) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      out.type = CU_MEMORYTYPE_ARRAY;
      out.array = a->array;
      out.gpu = a->gpu;
      out.x = w.getXInBytes();
      out.y = w.getY();
      out.z = w.getZ();
      return CUDA_SUCCESS;
    }
    case wire::CopySide::DEVICE:
    case wire::CopySide::HOST_SHARED: {
      auto range = linearRange(w, e);
      if (!range) return CUDA_ERROR_INVALID_VALUE;
      uint64_t base = w.isDevice() ? w.getDevice() : w.getHostShared();
      uint64_t start = 0;
      if (__builtin_add_overflow(base, range->first, &start)) return CUDA_ERROR_INVALID_VALUE;
      out.x = w.getXInBytes();
      out.y = w.getY();
      out.z = w.getZ();
      out.pitch = w.getPitch();
      out.height = w.getHeight();
      if (w.isDevice()) {
        out.gpu = ctx.tenant().memory().ownerOf(start, range->second);
        if (out.gpu == nullptr) return CUDA_ERROR_INVALID_VALUE;
        out.type = CU_MEMORYTYPE_DEVICE;
        out.device = base;
        return CUDA_SUCCESS;
      }
      // The mapping of the whole range, then its base as tallyd sees it.
      void* mapped = ctx.tenant().hostMappings().hostAddress(start, range->second);
      if (mapped == nullptr) return CUDA_ERROR_INVALID_VALUE;
      out.host = static_cast<const char*>(mapped) - range->first;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUDA_MEMCPY3D driverCopy(const Side& src, const Side& dst, const Extent& e) {
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = src.type;
  p.srcHost = src.host;
  p.srcDevice = src.device;
  p.srcArray = src.array;
  p.srcXInBytes = src.x;
  p.srcY = src.y;
  p.srcZ = src.z;
  p.srcPitch = src.pitch;
  p.srcHeight = src.height;
  p.dstMemoryType = dst.type;
  p.dstHost = const_cast<void*>(dst.host);
  p.dstDevice = dst.device;
  p.dstArray = dst.array;
  p.dstXInBytes = dst.x;
  p.dstY = dst.y;
  p.dstZ = dst.z;
  p.dstPitch = dst.pitch;
  p.dstHeight = dst.height;
  p.WidthInBytes = e.width;
  p.Height = e.height;
  p.Depth = e.depth;
  return p;
}

// One piece of a copy through staging: `depth` slices from `z` of the rectangle `rect`.
struct Piece {
  uint64_t z = 0, depth = 1;
  CopyPiece rect;
  uint64_t bytes() const { return depth * rect.bytes(); }
  uint64_t packedOffset(const Extent& e) const { return z * e.width * e.height + rect.packedOffset(e.width); }
};

// The whole copy when it fits `limit`, else each slice cut as a linear copy is.
std::vector<Piece> pieces(const Extent& e, uint64_t limit) {
  if (e.bytes <= limit) return {Piece{0, e.depth, CopyPiece{0, e.height, 0, e.width}}};
  std::vector<Piece> out;
  for (uint64_t z = 0; z < e.depth; ++z) {
    for (const CopyPiece& rect : splitIntoPieces(e.width, e.height, limit)) out.push_back(Piece{z, 1, rect});
  }
  return out;
}

// `p` narrowed to a piece; the staging side (packed, from its start) is set by the caller.
CUDA_MEMCPY3D narrowed(CUDA_MEMCPY3D p, const Piece& piece) {
  p.srcXInBytes += piece.rect.column;
  p.srcY += piece.rect.row;
  p.srcZ += piece.z;
  p.dstXInBytes += piece.rect.column;
  p.dstY += piece.rect.row;
  p.dstZ += piece.z;
  p.WidthInBytes = piece.rect.rowBytes;
  p.Height = piece.rect.rows;
  p.Depth = piece.depth;
  return p;
}

void fromBulk(CallContext& ctx, gpu::Gpu& g, CUstream stream, const CUDA_MEMCPY3D& p, const Extent& e) {
  size_t consumed = 0;
  auto refuseRest = [&](CUresult r) {
    if (ctx.skipBulk(e.bytes - consumed)) ctx.finish(r);
  };
  std::shared_ptr<gpu::StagingBuffer> staging;
  for (const Piece& piece : pieces(e, gpu::StagingPool::pieceLimit(ctx.tenant().stagingBudget().get()))) {
    if (staging) {
      // Kept until the copies queued so far are done (no notice to the client).
      if (CUresult r = g.completions().watchStream(stream, [staging](CUresult) {}); r != CUDA_SUCCESS) {
        return refuseRest(r);
      }
    }
    staging = g.staging().take(piece.bytes(), ctx.tenant().stagingBudget());
    if (!staging) return refuseRest(CUDA_ERROR_OUT_OF_MEMORY);
    if (!ctx.readBulk(staging->data(), piece.bytes())) return;
    consumed += piece.bytes();
    CUDA_MEMCPY3D q = narrowed(p, piece);
    q.srcHost = staging->data();
    q.srcXInBytes = q.srcY = q.srcZ = 0;
    q.srcPitch = piece.rect.rowBytes;
    q.srcHeight = piece.rect.rows;
    if (CUresult r = cuMemcpy3DAsync(&q, stream); r != CUDA_SUCCESS) return refuseRest(r);
  }
  replyWhenDone(ctx, g, stream, staging);
}

// Each piece lands in staging and goes to the client as HostData at its packed offset; the last
// one answers (one frame with the bytes when the copy is one piece).
void toBulk(CallContext& ctx, gpu::Gpu& g, CUstream stream, const CUDA_MEMCPY3D& p, const Extent& e, uint64_t token) {
  std::vector<Piece> all = pieces(e, gpu::StagingPool::pieceLimit(ctx.tenant().stagingBudget().get()));
  for (size_t i = 0; i < all.size(); ++i) {
    const Piece& piece = all[i];
    bool last = i + 1 == all.size();
    size_t bytes = piece.bytes();
    auto staging = g.staging().take(bytes, ctx.tenant().stagingBudget());
    if (!staging) return ctx.finish(CUDA_ERROR_OUT_OF_MEMORY);
    CUDA_MEMCPY3D q = narrowed(p, piece);
    q.dstHost = staging->data();
    q.dstXInBytes = q.dstY = q.dstZ = 0;
    q.dstPitch = piece.rect.rowBytes;
    q.dstHeight = piece.rect.rows;
    if (CUresult r = cuMemcpy3DAsync(&q, stream); r != CUDA_SUCCESS) return ctx.finish(r);
    CUresult r = sendStagedPiece(ctx, g, stream, std::move(staging), token, piece.packedOffset(e), bytes, last,
                                 last && all.size() == 1 && !ctx.oneWay());
    if (r != CUDA_SUCCESS) return ctx.finish(r);
  }
}

void copy(CallContext& ctx, wire::ArrayCopy::Reader args) {
  Extent e{args.getWidthInBytes(), std::max<uint64_t>(args.getHeight(), 1), std::max<uint64_t>(args.getDepth(), 1), 0};
  std::optional<uint64_t> area = checkedProduct(e.width, e.height);
  std::optional<uint64_t> bytes = area ? checkedProduct(*area, e.depth) : std::nullopt;
  if (!bytes) return ctx.protocolError(fmt::format("array copy of {} x {} x {} bytes overflows", e.width, e.height, e.depth));
  e.bytes = *bytes;
  const bool bulkIn = args.getSrc().isHost();
  const bool bulkOut = args.getDst().isHost();
  if (bulkIn && e.bytes > ctx.bulkLeft()) {
    return ctx.protocolError(fmt::format("array copy of {} bytes, but the frame carries {} bulk bytes", e.bytes,
                                         ctx.bulkLeft()));
  }
  auto refuse = [&](CUresult r) {
    if (bulkIn && !ctx.skipBulk(e.bytes)) return;
    ctx.finish(r);
  };
  if (e.bytes == 0) return refuse(CUDA_SUCCESS);
  Side src, dst;
  if (CUresult r = resolveSide(ctx, args.getSrc(), e, src); r != CUDA_SUCCESS) return refuse(r);
  if (CUresult r = resolveSide(ctx, args.getDst(), e, dst); r != CUDA_SUCCESS) return refuse(r);
  // One GPU does the copy: at least one side is its memory, and no side another GPU's.
  gpu::Gpu* g = src.gpu != nullptr ? src.gpu : dst.gpu;
  if (g == nullptr || (bulkIn && bulkOut) || (src.gpu != nullptr && dst.gpu != nullptr && src.gpu != dst.gpu)) {
    return refuse(CUDA_ERROR_INVALID_VALUE);
  }
  session::StreamState* s = streamForWork(ctx, args.getStream());
  if (s == nullptr) return refuse(CUDA_ERROR_INVALID_HANDLE);
  if (s->gpu != g) return refuse(CUDA_ERROR_INVALID_VALUE);
  // Through pooled staging: never captured (see memory_api.cc).
  if (bulkIn || bulkOut) {
    if (CUresult r = captureConflict(ctx, s->stream); r != CUDA_SUCCESS) return refuse(r);
  }
  g->makeCurrent();
  CUDA_MEMCPY3D p = driverCopy(src, dst, e);
  if (bulkIn) return fromBulk(ctx, *g, s->stream, p, e);
  if (bulkOut) return toBulk(ctx, *g, s->stream, p, e, args.getToken());
  if (CUresult r = cuMemcpy3DAsync(&p, s->stream); r != CUDA_SUCCESS) return ctx.finish(r);
  replyWhenDone(ctx, *g, s->stream);
}

// --- texture and surface objects ---------------------------------------------------------------

// The bytes of one element of `format` with `channels` channels, 0 when either is not one the
// driver has (or tallyd forwards).
size_t elementBytes(uint32_t format, uint32_t channels) {
  if (channels != 1 && channels != 2 && channels != 4) return 0;
  return session::arrayFormatBytes(static_cast<CUarray_format>(format)) * channels;
}

// The driver's resource for a wire one, every part checked to be the tenant's: `g` the GPU it
// lives on, `array` / `mipmapped` its array or mipmapped array id (0 for linear memory).
CUresult resourceOf(CallContext& ctx, wire::ResourceDesc::Reader w, CUDA_RESOURCE_DESC& out, gpu::Gpu*& g,
                    uint64_t& array, uint64_t& mipmapped) {
  out = CUDA_RESOURCE_DESC{};
  out.flags = w.getFlags();
  switch (w.which()) {
    case wire::ResourceDesc::ARRAY: {
      session::ArrayState* a = ctx.tenant().arrays().find(w.getArray());
      if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
      out.resType = CU_RESOURCE_TYPE_ARRAY;
      out.res.array.hArray = a->array;
      g = a->gpu;
      array = w.getArray();
      return CUDA_SUCCESS;
    }
    case wire::ResourceDesc::MIPMAPPED_ARRAY: {
      session::MipmappedState* m = ctx.tenant().arrays().findMipmapped(w.getMipmappedArray());
      if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
      out.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
      out.res.mipmap.hMipmappedArray = m->array;
      g = m->gpu;
      mipmapped = w.getMipmappedArray();
      return CUDA_SUCCESS;
    }
    case wire::ResourceDesc::LINEAR: {
      auto l = w.getLinear();
      if (elementBytes(l.getFormat(), l.getNumChannels()) == 0 || l.getSizeInBytes() == 0) return CUDA_ERROR_INVALID_VALUE;
      g = ctx.tenant().memory().ownerOf(l.getDevPtr(), l.getSizeInBytes());
      if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
      out.resType = CU_RESOURCE_TYPE_LINEAR;
      out.res.linear.devPtr = l.getDevPtr();
      out.res.linear.format = static_cast<CUarray_format>(l.getFormat());
      out.res.linear.numChannels = l.getNumChannels();
      out.res.linear.sizeInBytes = l.getSizeInBytes();
      return CUDA_SUCCESS;
    }
    case wire::ResourceDesc::PITCH2_D: {
      auto p = w.getPitch2D();
      size_t element = elementBytes(p.getFormat(), p.getNumChannels());
      std::optional<uint64_t> rowBytes = checkedProduct(p.getWidth(), element);
      if (element == 0 || !rowBytes || *rowBytes == 0 || p.getHeight() == 0) return CUDA_ERROR_INVALID_VALUE;
      std::optional<uint64_t> extent = regionExtent(PitchedRegion{*rowBytes, p.getHeight(), p.getPitchInBytes()});
      if (!extent || p.getPitchInBytes() < *rowBytes) return CUDA_ERROR_INVALID_VALUE;
      g = ctx.tenant().memory().ownerOf(p.getDevPtr(), *extent);
      if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
      out.resType = CU_RESOURCE_TYPE_PITCH2D;
      out.res.pitch2D.devPtr = p.getDevPtr();
      out.res.pitch2D.format = static_cast<CUarray_format>(p.getFormat());
      out.res.pitch2D.numChannels = p.getNumChannels();
      out.res.pitch2D.width = p.getWidth();
      out.res.pitch2D.height = p.getHeight();
      out.res.pitch2D.pitchInBytes = p.getPitchInBytes();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// The driver's texture descriptor; nullopt when an enum value is not one cuda.h names.
std::optional<CUDA_TEXTURE_DESC> textureDescOf(wire::TextureDesc::Reader w) {
  CUDA_TEXTURE_DESC t{};
  auto modes = w.getAddressMode();
  for (unsigned i = 0; i < 3; ++i) {
    auto mode = enumFromWire<CUaddress_mode>(i < modes.size() ? modes[i] : 0, static_cast<CUaddress_mode>(4));
    if (!mode) return std::nullopt;
    t.addressMode[i] = *mode;
  }
  auto filter = enumFromWire<CUfilter_mode>(w.getFilterMode(), static_cast<CUfilter_mode>(2));
  auto mipmapFilter = enumFromWire<CUfilter_mode>(w.getMipmapFilterMode(), static_cast<CUfilter_mode>(2));
  if (!filter || !mipmapFilter) return std::nullopt;
  t.filterMode = *filter;
  t.mipmapFilterMode = *mipmapFilter;
  t.flags = w.getFlags();
  t.maxAnisotropy = w.getMaxAnisotropy();
  t.mipmapLevelBias = w.getMipmapLevelBias();
  t.minMipmapLevelClamp = w.getMinMipmapLevelClamp();
  t.maxMipmapLevelClamp = w.getMaxMipmapLevelClamp();
  auto border = w.getBorderColor();
  for (unsigned i = 0; i < 4 && i < border.size(); ++i) t.borderColor[i] = border[i];
  return t;
}

std::optional<CUDA_RESOURCE_VIEW_DESC> viewOf(wire::ResourceViewDesc::Reader w) {
  auto format = enumFromWire<CUresourceViewFormat>(w.getFormat(),
                                                   static_cast<CUresourceViewFormat>(CU_RES_VIEW_FORMAT_UNSIGNED_BC7 + 1));
  if (!format) return std::nullopt;
  CUDA_RESOURCE_VIEW_DESC v{};
  v.format = *format;
  v.width = w.getWidth();
  v.height = w.getHeight();
  v.depth = w.getDepth();
  v.firstMipmapLevel = w.getFirstMipmapLevel();
  v.lastMipmapLevel = w.getLastMipmapLevel();
  v.firstLayer = w.getFirstLayer();
  v.lastLayer = w.getLastLayer();
  return v;
}

void createTexture(CallContext& ctx, wire::TextureCreate::Reader args) {
  session::ArrayTable& table = ctx.tenant().arrays();
  if (table.objectCount() >= session::ArrayTable::kMaxObjects) {
    return refused(ctx, "cuTexObjectCreate", CUDA_ERROR_OUT_OF_MEMORY, "too many texture and surface objects");
  }
  CUDA_RESOURCE_DESC resource;
  gpu::Gpu* g = nullptr;
  uint64_t array = 0, mipmapped = 0;
  if (CUresult r = resourceOf(ctx, args.getResource(), resource, g, array, mipmapped); r != CUDA_SUCCESS) {
    return ctx.finish(r);
  }
  std::optional<CUDA_TEXTURE_DESC> texture = textureDescOf(args.getTexture());
  std::optional<CUDA_RESOURCE_VIEW_DESC> view;
  if (args.getHasView()) {
    view = viewOf(args.getView());
    if (!view) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  }
  if (!texture) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  g->makeCurrent();
  CUtexObject object = 0;
  CUresult r = cuTexObjectCreate(&object, &resource, &*texture, view ? &*view : nullptr);
  if (r != CUDA_SUCCESS) return ctx.finish(r);
  table.addObject(object, session::TextureObjectState{g, array, mipmapped, false});
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) { reply.setValue(object); });
}

void createSurface(CallContext& ctx, wire::SurfaceCreate::Reader args) {
  session::ArrayTable& table = ctx.tenant().arrays();
  if (table.objectCount() >= session::ArrayTable::kMaxObjects) {
    return refused(ctx, "cuSurfObjectCreate", CUDA_ERROR_OUT_OF_MEMORY, "too many texture and surface objects");
  }
  if (!args.getResource().isArray()) return ctx.finish(CUDA_ERROR_INVALID_VALUE);  // surfaces are over arrays only
  CUDA_RESOURCE_DESC resource;
  gpu::Gpu* g = nullptr;
  uint64_t array = 0, mipmapped = 0;
  if (CUresult r = resourceOf(ctx, args.getResource(), resource, g, array, mipmapped); r != CUDA_SUCCESS) {
    return ctx.finish(r);
  }
  g->makeCurrent();
  CUsurfObject object = 0;
  if (CUresult r = cuSurfObjectCreate(&object, &resource); r != CUDA_SUCCESS) return ctx.finish(r);
  table.addObject(object, session::TextureObjectState{g, array, mipmapped, true});
  ctx.finish(CUDA_SUCCESS, [&](wire::Reply::Builder reply) { reply.setValue(object); });
}

void destroyObject(CallContext& ctx, uint64_t value, bool surface) {
  std::optional<session::ArrayState> released;
  std::optional<session::MipmappedState> releasedMipmapped;
  std::optional<session::TextureObjectState> object =
      ctx.tenant().arrays().removeObject(value, surface, released, releasedMipmapped);
  if (!object) return ctx.finish(CUDA_ERROR_INVALID_VALUE);
  object->gpu->makeCurrent();
  CUresult r = surface ? cuSurfObjectDestroy(value) : cuTexObjectDestroy(value);
  if (released) {
    if (CUresult d = ctx.tenant().destroyArray(*released); r == CUDA_SUCCESS) r = d;
  }
  if (releasedMipmapped) {
    if (CUresult d = ctx.tenant().destroyMipmapped(*releasedMipmapped); r == CUDA_SUCCESS) r = d;
  }
  ctx.finish(r);
}

}  // namespace

void handleArray(CallContext& ctx, wire::Call::Reader call) {
  switch (call.which()) {
    case wire::Call::ARRAY_CREATE: return create(ctx, call.getArrayCreate());
    case wire::Call::ARRAY_DESTROY: return destroy(ctx, call.getArrayDestroy().getArray());
    case wire::Call::ARRAY_COPY: return copy(ctx, call.getArrayCopy());
    case wire::Call::TEXTURE_CREATE: return createTexture(ctx, call.getTextureCreate());
    case wire::Call::TEXTURE_DESTROY: return destroyObject(ctx, call.getTextureDestroy().getObject(), false);
    case wire::Call::SURFACE_CREATE: return createSurface(ctx, call.getSurfaceCreate());
    case wire::Call::SURFACE_DESTROY: return destroyObject(ctx, call.getSurfaceDestroy().getObject(), true);
    case wire::Call::MIPMAPPED_ARRAY_CREATE: return createMipmapped(ctx, call.getMipmappedArrayCreate());
    case wire::Call::MIPMAPPED_ARRAY_GET_LEVEL: return getLevel(ctx, call.getMipmappedArrayGetLevel());
    case wire::Call::MIPMAPPED_ARRAY_DESTROY: return destroyMipmapped(ctx, call.getMipmappedArrayDestroy().getArray());
    default: return ctx.finish(CUDA_ERROR_NOT_SUPPORTED);
  }
}

}  // namespace tally::server::api
