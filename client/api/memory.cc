// Memory family. Device addresses are tallyd's; host memory from cudaMallocHost is shared
// with tallyd through a memfd on Unix sockets (so copies to and from it are DMA at native
// speed and happen in stream order), and travels as bulk bytes otherwise.
#include "client/api/api_util.h"
#include "client/api/array_handles.h"
#include "client/entry/not_supported.h"
#include "client/runtime/argument_checks.h"
#include "client/runtime/capture_table.h"
#include "client/runtime/staging_ring.h"
#include "client/transport/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

using namespace tally::client;

namespace {

constexpr size_t kBulkChunk = 32u << 20;

ClientRuntime& rt() { return ClientRuntime::get(); }

// --- allocation ------------------------------------------------------------------------

CUresult allocateDevice(CUdeviceptr* out, size_t size) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;
  if (size == 0) {
    *out = 0;
    return CUDA_SUCCESS;
  }
  ReplyMessage reply;
  uint32_t device = currentDevice();
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto a = c.initMemAlloc();
    a.setDevice(device);
    a.setSize(size);
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  *out = reply.reply().getValue();
  rt().addDeviceRegion(*out, {.size = size, .device = device, .allocation = true});
  return CUDA_SUCCESS;
}

CUresult allocatePitch(CUdeviceptr* out, size_t* pitch, size_t width, size_t height) {
  if (out == nullptr || pitch == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;
  ReplyMessage reply;
  uint32_t device = currentDevice();
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto a = c.initMemAlloc();
    a.setDevice(device);
    a.setPitchWidth(width);
    a.setPitchHeight(height);
  }, &reply);
  if (r != CUDA_SUCCESS) return r;
  *out = reply.reply().getMemInfo().getFree();
  *pitch = reply.reply().getMemInfo().getTotal();
  rt().addDeviceRegion(*out, {.size = *pitch * height, .device = device, .allocation = true});
  return CUDA_SUCCESS;
}

CUresult freeShared(void* p, const HostRegion& region);

CUresult freeDevice(CUdeviceptr ptr) {
  if (CUresult r = refuseUnsafeCallDuringCapture(); r != CUDA_SUCCESS) return r;  // cudaFree(0) too
  if (ptr == 0) return rt().ready();
  // Managed memory is shared host memory (managed_memory.cc); cudaFree is how it goes.
  if (auto found = rt().findHostRegion(reinterpret_cast<const void*>(ptr)); found && found->second.managed) {
    if (found->first != ptr) return CUDA_ERROR_INVALID_VALUE;
    void* p = reinterpret_cast<void*>(ptr);
    std::optional<HostRegion> region = rt().removeHostRegion(p);
    return region ? freeShared(p, *region) : CUDA_ERROR_INVALID_VALUE;
  }
  CUresult r = rt().sync([&](wire::Call::Builder c) { c.initMemFree().setPtr(ptr); });
  if (r == CUDA_SUCCESS) rt().removeDeviceRegion(ptr);
  return r;
}

// Pinned memory: a memfd tallyd maps and registers, or plain memory when it cannot.
CUresult allocateHost(void** out, size_t size, unsigned flags = 0) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  size_t rounded = (std::max<size_t>(size, 1) + 4095) / 4096 * 4096;
  if (rt().sharedHostMemory()) {
    void* p = nullptr;
    uint64_t serverAddress = 0;
    CUresult r = rt().mapSharedHostMemory(rounded, p, serverAddress);
    if (r == CUDA_SUCCESS) {
      rt().addHostRegion(p, HostRegion{rounded, flags, true, serverAddress});
      *out = p;
      return CUDA_SUCCESS;
    }
    spdlog::warn("tally: tallyd could not map pinned memory ({}); using unshared memory", static_cast<int>(r));
  }
  void* p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  rt().addHostRegion(p, HostRegion{rounded, flags, false, 0});
  *out = p;
  return CUDA_SUCCESS;
}

CUresult freeHost(void* p) {
  if (p == nullptr) return CUDA_SUCCESS;
  // Registered memory is the application's: cudaHostUnregister, never cudaFreeHost; managed
  // memory goes with cudaFree.
  if (auto found = rt().findHostRegion(p); !found || found->first != reinterpret_cast<uintptr_t>(p) ||
                                           found->second.registered || found->second.managed) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::optional<HostRegion> region = rt().removeHostRegion(p);
  if (!region) return CUDA_ERROR_INVALID_VALUE;
  if (!region->shared) {
    std::free(p);
    return CUDA_SUCCESS;
  }
  return freeShared(p, *region);
}

// Memory shared with tallyd: tallyd lets go of its mapping, then the client.
CUresult freeShared(void* p, const HostRegion& region) {
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initHostUnregister().setClientAddress(reinterpret_cast<uint64_t>(p)); });
  ::munmap(p, region.size);
  return r;
}

// --- copies ------------------------------------------------------------------------------

// Where a host range lives: inside one host region (pinned), shared with tallyd or not.
std::optional<HostRegion> hostRegionOf(uint64_t address, size_t size) {
  auto found = rt().findHostRegion(reinterpret_cast<const void*>(address));
  if (!found || address - found->first + size > found->second.size) return std::nullopt;
  return found->second;
}

CUresult sendCopy(const CallBuilder& build, bool sync, std::span<const iovec> bulk = {}) {
  return sync ? rt().sync(build, nullptr, bulk) : rt().post(build, bulk);
}

void fillCopy(wire::Memcpy::Builder m, wire::CopyKind kind, uint64_t stream, const Copy2D& c) {
  m.setKind(kind);
  m.setStream(stream);
  m.setDst(c.dst);
  m.setSrc(c.src);
  m.setWidth(c.width);
  m.setHeight(c.height);
  m.setDstPitch(c.dstPitch);
  m.setSrcPitch(c.srcPitch);
}

// A large flat copy over TCP/TLS with bulk lanes: each piece's message goes on the connection,
// its bytes on the lanes (client/transport/bulk_lanes.h); only the last piece is waited for.
CUresult copyToDeviceThroughLanes(BulkLanes& lanes, const Copy2D& c, uint64_t stream, bool sync) {
  std::lock_guard order(lanes.order());
  for (size_t done = 0; done < c.width; done += kBulkChunk) {
    size_t bytes = std::min(kBulkChunk, c.width - done);
    const bool wait = sync && done + bytes >= c.width;
    Copy2D piece{c.dst + done, bytes, c.src + done, bytes, bytes, 1};
    uint64_t token = rt().connection().newToken();
    auto build = [&](wire::Call::Builder call) {
      auto m = call.initMemcpy();
      fillCopy(m, wire::CopyKind::HOST_TO_DEVICE, stream, piece);
      m.setViaLanes(true);
      m.setToken(token);
    };
    Connection::PendingCall pending;
    if (CUresult r = wait ? rt().startCall(pending, build) : rt().postNow(build); r != CUDA_SUCCESS) return r;
    CUresult sent = lanes.send(token, reinterpret_cast<const char*>(piece.src), bytes);
    CUresult own = wait ? rt().finishCall(pending) : CUDA_SUCCESS;
    if (sent != CUDA_SUCCESS) return sent;
    if (own != CUDA_SUCCESS) return own;
    if (wait) return rt().takePendingAsyncError();
  }
  return CUDA_SUCCESS;
}

CUresult copyToDevice(const Copy2D& c, uint64_t stream, bool sync) {
  if (auto region = hostRegionOf(c.src, c.extent(c.srcPitch)); region && region->shared) {
    return sendCopy([&](wire::Call::Builder call) {
      auto m = call.initMemcpy();
      fillCopy(m, wire::CopyKind::HOST_TO_DEVICE, stream, c);
      m.setHostShared(true);
    }, sync);
  }
  // Bytes are taken now, so the callbacks enqueued before this copy must have run (natively
  // the copy reads the buffer when the stream reaches it, after them).
  rt().waitForHostCallbacks();
  if (sync && c.height == 1 && c.width >= StagingRing::kMinBytes && rt().stagingRing() != nullptr) {
    auto r = rt().stagingRing()->toDevice(c.dst, reinterpret_cast<const char*>(c.src), c.width, stream);
    if (r) return *r;
  }
  if (BulkLanes* lanes = rt().connection().lanes(); lanes != nullptr && c.height == 1 && c.width >= BulkLanes::kMinCopyBytes) {
    return copyToDeviceThroughLanes(*lanes, c, stream, sync);
  }
  if (c.height == 1 && c.width > kBulkChunk) {  // a flat copy: pieces of kBulkChunk bytes
    for (size_t done = 0; done < c.width; done += kBulkChunk) {
      size_t bytes = std::min(kBulkChunk, c.width - done);
      Copy2D piece{c.dst + done, bytes, c.src + done, bytes, bytes, 1};
      iovec bulk{reinterpret_cast<void*>(piece.src), bytes};
      CUresult r = sendCopy([&](wire::Call::Builder call) {
        fillCopy(call.initMemcpy(), wire::CopyKind::HOST_TO_DEVICE, stream, piece);
      }, sync && done + bytes >= c.width, std::span<const iovec>(&bulk, 1));
      if (r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  }
  // Bulk rows, packed, in chunks of whole rows; only the last chunk is waited for.
  size_t rowsPerChunk = std::max<size_t>(1, kBulkChunk / std::max<size_t>(c.width, 1));
  std::vector<char> packed;
  for (size_t row = 0; row < std::max<size_t>(c.height, 1); row += rowsPerChunk) {
    size_t rows = std::min(rowsPerChunk, c.height - row);
    bool last = row + rows >= c.height;
    const char* src = reinterpret_cast<const char*>(c.src) + row * c.srcPitch;
    iovec bulk{const_cast<char*>(src), c.width * rows};
    if (c.srcPitch != c.width && rows > 1) {
      packed.resize(c.width * rows);
      for (size_t r = 0; r < rows; ++r) {
        if (!host_memory::copyIn(packed.data() + r * c.width, src + r * c.srcPitch, c.width)) return CUDA_ERROR_INVALID_VALUE;
      }
      bulk.iov_base = packed.data();
    }
    Copy2D chunk{c.dst + row * c.dstPitch, c.dstPitch, 0, c.width, c.width, rows};
    CUresult r = sendCopy([&](wire::Call::Builder call) {
      fillCopy(call.initMemcpy(), wire::CopyKind::HOST_TO_DEVICE, stream, chunk);
    }, sync && last, std::span<const iovec>(&bulk, 1));
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

void fillSharedCopyToHost(wire::Call::Builder call, uint64_t stream, const Copy2D& c) {
  auto m = call.initMemcpy();
  fillCopy(m, wire::CopyKind::DEVICE_TO_HOST, stream, c);
  m.setHostShared(true);
}

// A small copy into pageable memory (natively synchronous too): the GPU writes the bytes into a
// landing area shared with tallyd, and this thread copies them out once the call ended (on its
// completion word, usually): no staging in tallyd and no reply carrying them. nullopt: no area.
std::optional<CUresult> copyToHostThroughLanding(const Copy2D& c, uint64_t stream) {
  LandingAreas* areas = rt().landingAreas();
  FreeSlots::Lease area = areas != nullptr ? areas->take() : FreeSlots::Lease();
  if (!area) return std::nullopt;
  char* landing = areas->data(area);
  Copy2D landed = c;
  landed.dst = reinterpret_cast<uint64_t>(landing);
  CUresult r = rt().sync([&](wire::Call::Builder call) { fillSharedCopyToHost(call, stream, landed); });
  if (r == CUDA_SUCCESS && !host_memory::copyOut(reinterpret_cast<char*>(c.dst), landing, c.width)) {
    r = CUDA_ERROR_INVALID_VALUE;  // the application's destination cannot be written
  }
  if (r == CUDA_SUCCESS) rt().noteStreamDrained(stream, Connection::lastMessageOfThisThread());
  return r;
}

CUresult copyToHost(const Copy2D& c, uint64_t stream, bool sync) {
  auto region = hostRegionOf(c.dst, c.extent(c.dstPitch));
  if (region && region->shared) {
    return sendCopy([&](wire::Call::Builder call) { fillSharedCopyToHost(call, stream, c); }, sync);
  }
  if (!region && c.height == 1 && c.width <= LandingAreas::kAreaBytes) {
    if (auto r = copyToHostThroughLanding(c, stream)) return *r;
  }
  if (!region && c.height == 1 && c.width >= StagingRing::kMinBytes && rt().stagingRing() != nullptr) {
    // Pageable destination: natively synchronous anyway, so the shared slots can carry it.
    auto r = rt().stagingRing()->toHost(reinterpret_cast<char*>(c.dst), c.src, c.width, stream);
    if (r) return *r;
  }
  bool packed = c.dstPitch == c.width || c.height <= 1;
  // Pageable destinations are synchronous natively too; only unshared pinned memory is async.
  bool wait = sync || !region || !packed;
  std::vector<char> temp;
  char* landing = reinterpret_cast<char*>(c.dst);
  if (!packed) {
    temp.resize(c.width * c.height);
    landing = temp.data();
  }
  Connection& connection = rt().connection();
  const size_t bytes = c.width * std::max<size_t>(c.height, 1);
  uint64_t token = connection.expectHostData(landing, bytes);
  // Bytes on bulk lanes may arrive after the reply: a waited copy waits for them too.
  const bool viaLanes = wait && connection.lanes() != nullptr && bytes >= BulkLanes::kMinCopyBytes;
  auto build = [&](wire::Call::Builder call) {
    auto m = call.initMemcpy();
    fillCopy(m, wire::CopyKind::DEVICE_TO_HOST, stream, c);
    m.setToken(token);
    m.setViaLanes(viaLanes);
  };
  CUresult r = CUDA_SUCCESS;
  if (viaLanes) {
    r = rt().call(build);
    if (r == CUDA_SUCCESS && !connection.waitHostData(token)) r = connection.lostStatus();
    if (r == CUDA_SUCCESS) r = rt().takePendingAsyncError();
  } else {
    // The receiver writes HostData before it routes the reply that follows it, so once a
    // waited-for call returns, every byte is in place.
    r = sendCopy(build, wait);
  }
  // A destination the application unmapped meanwhile: its bytes were dropped, not written.
  if (wait && !connection.forgetHostData(token) && r == CUDA_SUCCESS) r = CUDA_ERROR_INVALID_VALUE;
  // The copy ran after all earlier work of its stream, and its reply came after the copy.
  if (wait && r == CUDA_SUCCESS) rt().noteStreamDrained(stream, Connection::lastMessageOfThisThread());
  if (r == CUDA_SUCCESS && !packed) {
    for (size_t row = 0; row < c.height && r == CUDA_SUCCESS; ++row) {
      if (!host_memory::copyOut(reinterpret_cast<char*>(c.dst) + row * c.dstPitch, temp.data() + row * c.width, c.width)) {
        r = CUDA_ERROR_INVALID_VALUE;
      }
    }
  }
  return r;
}

CUresult copyDeviceToDevice(const Copy2D& c, uint64_t stream, bool sync) {
  return sendCopy([&](wire::Call::Builder call) {
    fillCopy(call.initMemcpy(), wire::CopyKind::DEVICE_TO_DEVICE, stream, c);
  }, sync);
}

bool isDevicePointer(uint64_t p) { return rt().findDeviceRegion(p).has_value(); }

// Host memory the client allocated (cudaMallocHost) is known to be mapped; any other host
// range it reads has its edges probed (checkHostRows), so that a bad pointer gets an error code
// before anything is sent. A hole inside it is caught where the bytes are touched: every copy
// of the application's memory goes through the kernel (host_memory::copyIn/copyOut,
// sendCounting).
CUresult checkHostSide(uint64_t address, size_t pitch, const Copy2D& c, HostAccess access) {
  if (hostRegionOf(address, c.extent(pitch))) return CUDA_SUCCESS;
  return checkHostRows(address, c.width, pitch, c.height, access);
}

CUresult checkHostSides(const Copy2D& c, cudaMemcpyKind kind) {
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) {
    if (CUresult r = checkHostSide(c.src, c.srcPitch, c, HostAccess::kRead); r != CUDA_SUCCESS) return r;
  }
  // A device-to-host destination is not probed: its bytes only ever land through copyOut, which
  // fails the copy on a bad page, and a probe would cost a small copy two system calls more.
  if (kind == cudaMemcpyHostToHost) {
    if (CUresult r = checkHostSide(c.dst, c.dstPitch, c, HostAccess::kWrite); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// A capturing stream records copies between device memory and memory shared with tallyd. A
// synchronous copy, or one whose host bytes travel when it is made (pageable or unshared
// memory), cannot be replayed: refused, and the capture invalidated, as natively.
CUresult checkCapturedCopy(const Copy2D& c, cudaMemcpyKind kind, uint64_t stream, bool sync) {
  if (captureTable().status(stream).status == CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_SUCCESS;
  auto shared = [&](uint64_t address, size_t pitch) {
    auto region = hostRegionOf(address, c.extent(pitch));
    return region && region->shared;
  };
  bool replayable = kind == cudaMemcpyDeviceToDevice || (kind == cudaMemcpyHostToDevice && shared(c.src, c.srcPitch)) ||
                    (kind == cudaMemcpyDeviceToHost && shared(c.dst, c.dstPitch));
  if (replayable && !sync) return CUDA_SUCCESS;
  captureTable().invalidate(stream);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult waitForStream(uint64_t streamId) {
  return rt().sync([&](wire::Call::Builder call) { call.initStreamSynchronize().setStream(streamId); });
}

cudaMemcpyKind kindOf(bool dstDevice, bool srcDevice) {
  return dstDevice ? (srcDevice ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                   : (srcDevice ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

CUresult copy(const Copy2D& c, cudaMemcpyKind kind, CUstream stream, bool sync) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return static_cast<CUresult>(cudaErrorInvalidMemcpyDirection);
  if (c.width == 0 || c.height == 0) return CUDA_SUCCESS;
  if (CUresult r = checkCopyShape(c); r != CUDA_SUCCESS) return r;
  auto dstRegion = rt().findHostRegion(reinterpret_cast<const void*>(c.dst));
  auto srcRegion = rt().findHostRegion(reinterpret_cast<const void*>(c.src));
  // Whatever kind the application names for managed memory, the copy goes where the bytes are.
  // So does a side named as device memory that is host memory the client knows (pinned memory
  // named by its unified address: XLA reads its pinned flags back with cuMemcpyDtoH). A
  // host-to-host copy then waits for the stream first (its kernels may still be writing them).
  const bool managed = (dstRegion && dstRegion->second.managed) || (srcRegion && srcRegion->second.managed);
  const bool streamOrdered = managed || kind != cudaMemcpyHostToHost;
  if (managed || kind == cudaMemcpyDefault) {
    kind = kindOf(isDevicePointer(c.dst), isDevicePointer(c.src));
  } else {
    // (tallyd's device addresses are not the client's: a known device range wins.)
    bool dstDevice = (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) &&
                     (!dstRegion || isDevicePointer(c.dst));
    bool srcDevice = (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) &&
                     (!srcRegion || isDevicePointer(c.src));
    kind = kindOf(dstDevice, srcDevice);
  }
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = checkHostSides(c, kind); r != CUDA_SUCCESS) return r;
  if (CUresult r = checkCapturedCopy(c, kind, streamId, sync); r != CUDA_SUCCESS) return r;
  switch (kind) {
    case cudaMemcpyHostToDevice: return copyToDevice(c, streamId, sync);
    case cudaMemcpyDeviceToHost: return copyToHost(c, streamId, sync);
    case cudaMemcpyDeviceToDevice: return copyDeviceToDevice(c, streamId, sync);
    case cudaMemcpyHostToHost:
      if (sync || streamOrdered) {
        if (CUresult r = waitForStream(streamId); r != CUDA_SUCCESS) return r;
      }
      for (size_t row = 0; row < c.height; ++row) {
        std::memmove(reinterpret_cast<void*>(c.dst + row * c.dstPitch), reinterpret_cast<const void*>(c.src + row * c.srcPitch), c.width);
      }
      return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult copy1D(void* dst, const void* src, size_t count, cudaMemcpyKind kind, CUstream stream, bool sync) {
  Copy2D c{reinterpret_cast<uint64_t>(dst), count, reinterpret_cast<uint64_t>(src), count, count, 1};
  return copy(c, kind, stream, sync);
}

CUresult copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                cudaMemcpyKind kind, CUstream stream, bool sync) {
  Copy2D c{reinterpret_cast<uint64_t>(dst), dpitch, reinterpret_cast<uint64_t>(src), spitch, width, height};
  return copy(c, kind, stream, sync);
}

// cuMemcpy2D's parameter block as a Copy2D: each side is host, device or unified memory at
// (x, y) of its pitch; a copy with a CUDA array side goes to array.cc.
CUresult copyDescriptor(const CUDA_MEMCPY2D* p, CUstream stream, bool sync) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    return copy2DWithArray(*p, stream, sync);
  }
  auto side = [](CUmemorytype type, const void* host, CUdeviceptr device, size_t x, size_t y, size_t pitch) {
    uint64_t base = type == CU_MEMORYTYPE_HOST ? reinterpret_cast<uint64_t>(host) : device;
    return base + y * pitch + x;
  };
  Copy2D c{side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY, p->dstPitch), p->dstPitch,
           side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY, p->srcPitch), p->srcPitch,
           p->WidthInBytes, p->Height};
  bool srcHost = p->srcMemoryType == CU_MEMORYTYPE_HOST, dstHost = p->dstMemoryType == CU_MEMORYTYPE_HOST;
  bool unified = p->srcMemoryType == CU_MEMORYTYPE_UNIFIED || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED;
  cudaMemcpyKind kind = unified   ? cudaMemcpyDefault
                        : srcHost ? (dstHost ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
                                  : (dstHost ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
  return copy(c, kind, stream, sync);
}

// --- memset ----------------------------------------------------------------------------

// Whether a memset of `dst` is done by the client: managed memory, and pinned memory tallyd
// does not share (over TCP), which programs may set through its unified address as natively.
// tallyd sets shared pinned memory itself, in stream order.
bool memsetOnHost(CUdeviceptr dst) {
  auto region = rt().findHostRegion(reinterpret_cast<const void*>(dst));
  // (tallyd's device addresses are not the client's: a known device range wins.)
  return region && (region->second.managed || !region->second.shared) && !isDevicePointer(dst);
}

// A memset the host does, after the stream's earlier work.
CUresult memsetHostMemory(CUdeviceptr dst, uint32_t value, unsigned elementSize, size_t width, size_t height,
                          size_t pitch, uint64_t streamId) {
  auto region = rt().findHostRegion(reinterpret_cast<const void*>(dst));
  if (!region) return CUDA_ERROR_INVALID_VALUE;
  size_t rowBytes = 0, extent = 0;
  if (__builtin_mul_overflow(width, elementSize, &rowBytes) || __builtin_mul_overflow(pitch, height - 1, &extent) ||
      __builtin_add_overflow(extent, rowBytes, &extent) || dst - region->first + extent > region->second.size) {
    return CUDA_ERROR_INVALID_VALUE;  // past the allocation
  }
  if (CUresult r = waitForStream(streamId); r != CUDA_SUCCESS) return r;
  for (size_t row = 0; row < height; ++row) {
    auto* p = reinterpret_cast<unsigned char*>(dst + row * pitch);
    for (size_t i = 0; i < width; ++i) std::memcpy(p + i * elementSize, &value, elementSize);  // little-endian
  }
  return CUDA_SUCCESS;
}

CUresult memset(CUdeviceptr dst, uint32_t value, unsigned elementSize, size_t width, size_t height, size_t pitch,
                CUstream stream) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (CUresult r = checkMemsetShape({dst, elementSize, width, height, pitch}); r != CUDA_SUCCESS) return r;
  uint64_t streamId = rt().streamId(stream);
  if (streamId == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (memsetOnHost(dst)) return memsetHostMemory(dst, value, elementSize, width, height, pitch, streamId);
  return rt().post([&](wire::Call::Builder c) {
    auto m = c.initMemset();
    m.setStream(streamId);
    m.setDst(dst);
    m.setValue(value);
    m.setElementSize(static_cast<uint8_t>(elementSize));
    m.setWidth(width);
    m.setHeight(height);
    m.setPitch(pitch);
  });
}

// cudaMemset3D: one pitched memset per depth slice, or one for all of them when the slices are
// contiguous (the allocation's height is the extent's).
CUresult memset3D(cudaPitchedPtr p, int value, cudaExtent e, CUstream stream) {
  if (e.width == 0 || e.height == 0 || e.depth == 0) return CUDA_SUCCESS;
  auto base = reinterpret_cast<CUdeviceptr>(p.ptr);
  const auto byte = static_cast<uint8_t>(value);
  // One row is a linear range whatever the pitch (the native runtime accepts width > pitch then).
  if (e.height == 1 && e.depth == 1) return memset(base, byte, 1, e.width, 1, e.width, stream);
  if (e.height > p.ysize) return CUDA_ERROR_INVALID_VALUE;
  size_t slices = 0;
  if (e.height == p.ysize && !__builtin_mul_overflow(e.height, e.depth, &slices)) {
    return memset(base, byte, 1, e.width, slices, p.pitch, stream);
  }
  size_t sliceBytes = 0;
  if (__builtin_mul_overflow(p.pitch, p.ysize, &sliceBytes)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t z = 0; z < e.depth; ++z) {
    size_t offset = 0;
    if (__builtin_mul_overflow(z, sliceBytes, &offset)) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = memset(base + offset, byte, 1, e.width, e.height, p.pitch, stream); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// --- symbols -----------------------------------------------------------------------------

CUresult symbolAddress(const void* symbol, CUdeviceptr& address, size_t& size) {
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  VariableRecord* v = rt().variableFor(symbol);
  if (v == nullptr) return static_cast<CUresult>(cudaErrorInvalidSymbol);
  size = v->size;
  return rt().variableAddress(v, currentDevice(), address);
}

cudaError_t copySymbol(const void* symbol, void* host, size_t count, size_t offset, cudaMemcpyKind kind,
                       cudaStream_t stream, bool sync, bool toSymbol) {
  return guardRuntime("cudaMemcpy[To|From]Symbol", [&] {
    CUdeviceptr address = 0;
    size_t size = 0;
    if (CUresult r = symbolAddress(symbol, address, size); r != CUDA_SUCCESS) return r;
    if (offset > size || count > size - offset) return CUDA_ERROR_INVALID_VALUE;
    if (kind == cudaMemcpyDefault) kind = toSymbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    void* symbolPtr = reinterpret_cast<void*>(address + offset);
    return toSymbol ? copy1D(symbolPtr, host, count, kind, stream, sync) : copy1D(host, symbolPtr, count, kind, stream, sync);
  });
}

// --- pointer attributes ------------------------------------------------------------------

// The allocation a pointer lies in, as cuPointerGetAttribute's range attributes name it.
struct PointerRange {
  uint64_t base = 0;
  size_t size = 0;
};

void describePointer(const void* ptr, cudaPointerAttributes& attr, PointerRange* range = nullptr) {
  attr = cudaPointerAttributes{};
  auto address = reinterpret_cast<uint64_t>(ptr);
  if (auto device = rt().findDeviceRegion(address)) {
    attr.type = cudaMemoryTypeDevice;
    attr.device = static_cast<int>(device->second.device);
    attr.devicePointer = const_cast<void*>(ptr);
    if (range != nullptr) *range = {device->first, device->second.size};
    return;
  }
  if (auto host = rt().findHostRegion(ptr)) {
    attr.type = host->second.managed ? cudaMemoryTypeManaged : cudaMemoryTypeHost;
    attr.device = 0;
    attr.hostPointer = const_cast<void*>(ptr);
    if (host->second.serverAddress != 0) {
      attr.devicePointer = reinterpret_cast<void*>(host->second.serverAddress + (address - host->first));
    }
    if (range != nullptr) *range = {host->first, host->second.size};
    return;
  }
  attr.type = cudaMemoryTypeUnregistered;
  attr.device = -2;
}

}  // namespace

// --- runtime -----------------------------------------------------------------------------------

TALLY_API cudaError_t cudaMalloc(void** ptr, size_t size) {
  return guardRuntime(__func__, [&] { return allocateDevice(reinterpret_cast<CUdeviceptr*>(ptr), size); });
}

TALLY_API cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  return guardRuntime(__func__, [&] { return allocatePitch(reinterpret_cast<CUdeviceptr*>(ptr), pitch, width, height); });
}

// A pitched allocation of height x depth rows: what cudaMemcpy3D's pitched pointers name.
TALLY_API cudaError_t cudaMalloc3D(cudaPitchedPtr* out, cudaExtent extent) {
  return guardRuntime(__func__, [&] {
    if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
    size_t rows = 0;
    if (__builtin_mul_overflow(extent.height, extent.depth, &rows)) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr ptr = 0;
    size_t pitch = 0;
    CUresult r = allocatePitch(&ptr, &pitch, extent.width, rows);
    if (r != CUDA_SUCCESS) return r;
    *out = cudaPitchedPtr{reinterpret_cast<void*>(ptr), pitch, extent.width, extent.height};
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaFree(void* ptr) {
  return guardRuntime(__func__, [&] { return freeDevice(reinterpret_cast<CUdeviceptr>(ptr)); });
}

TALLY_API cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return guardRuntime(__func__, [&] { return allocateHost(ptr, size); });
}

TALLY_API cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return guardRuntime(__func__, [&] { return allocateHost(ptr, size, flags); });
}

TALLY_API cudaError_t cudaHostGetFlags(unsigned int* flags, void* host) {
  return guardRuntime(__func__, [&] {
    if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
    // Registered memory has flags too (measured natively on the H200, driver 580).
    auto region = rt().findHostRegion(host);
    if (!region) return CUDA_ERROR_INVALID_VALUE;
    *flags = region->second.flags;
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaFreeHost(void* ptr) {
  return guardRuntime(__func__, [&] { return freeHost(ptr); });
}

// cudaHostRegister and cudaHostUnregister: host_register.cc.

TALLY_API cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned int flags) {
  return guardRuntime(__func__, [&] {
    if (device == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    auto region = rt().findHostRegion(host);
    if (region && region->second.registered) return registeredDevicePointer(region->first, region->second, host, device);
    if (!region || region->second.serverAddress == 0) return CUDA_ERROR_INVALID_VALUE;
    *device = reinterpret_cast<void*>(region->second.serverAddress + (reinterpret_cast<uintptr_t>(host) - region->first));
    return CUDA_SUCCESS;
  });
}

TALLY_API cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] { return copy1D(dst, src, count, kind, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return copy1D(dst, src, count, kind, stream, false); });
}

TALLY_API cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                                   cudaMemcpyKind kind) {
  return guardRuntime(__func__, [&] { return copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, true); });
}

TALLY_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                        size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return copy2D(dst, dpitch, src, spitch, width, height, kind, stream, false); });
}

// Peer copies: with unified addressing the pointers name their devices, so this is a
// device-to-device copy once both device numbers are valid.
cudaError_t copyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count, cudaStream_t stream,
                     bool sync) {
  return guardRuntime("cudaMemcpyPeer", [&] {
    const int devices = rt().deviceCount();
    if (dstDevice < 0 || srcDevice < 0 || dstDevice >= devices || srcDevice >= devices) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    return copy1D(dst, src, count, cudaMemcpyDeviceToDevice, stream, sync);
  });
}

TALLY_API cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  return copyPeer(dst, dstDevice, src, srcDevice, count, nullptr, true);
}

TALLY_API cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                          cudaStream_t stream) {
  return copyPeer(dst, dstDevice, src, srcDevice, count, stream, false);
}

TALLY_API cudaError_t cudaMemset(void* dst, int value, size_t count) {
  return guardRuntime(__func__, [&] {
    return memset(reinterpret_cast<CUdeviceptr>(dst), static_cast<uint8_t>(value), 1, count, 1, count, nullptr);
  });
}

TALLY_API cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  return guardRuntime(__func__, [&] {
    return memset(reinterpret_cast<CUdeviceptr>(dst), static_cast<uint8_t>(value), 1, count, 1, count, stream);
  });
}

TALLY_API cudaError_t cudaMemset2D(void* dst, size_t pitch, int value, size_t width, size_t height) {
  return guardRuntime(__func__, [&] {
    return memset(reinterpret_cast<CUdeviceptr>(dst), static_cast<uint8_t>(value), 1, width, height, pitch, nullptr);
  });
}

TALLY_API cudaError_t cudaMemset2DAsync(void* dst, size_t pitch, int value, size_t width, size_t height,
                                        cudaStream_t stream) {
  return guardRuntime(__func__, [&] {
    return memset(reinterpret_cast<CUdeviceptr>(dst), static_cast<uint8_t>(value), 1, width, height, pitch, stream);
  });
}

TALLY_API cudaError_t cudaMemset3D(cudaPitchedPtr ptr, int value, cudaExtent extent) {
  return guardRuntime(__func__, [&] { return memset3D(ptr, value, extent, nullptr); });
}

TALLY_API cudaError_t cudaMemset3DAsync(cudaPitchedPtr ptr, int value, cudaExtent extent, cudaStream_t stream) {
  return guardRuntime(__func__, [&] { return memset3D(ptr, value, extent, stream); });
}

TALLY_API cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset,
                                         cudaMemcpyKind kind) {
  return copySymbol(symbol, const_cast<void*>(src), count, offset, kind, nullptr, true, true);
}

TALLY_API cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                              cudaMemcpyKind kind, cudaStream_t stream) {
  return copySymbol(symbol, const_cast<void*>(src), count, offset, kind, stream, false, true);
}

TALLY_API cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset,
                                           cudaMemcpyKind kind) {
  return copySymbol(symbol, dst, count, offset, kind, nullptr, true, false);
}

TALLY_API cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                                cudaMemcpyKind kind, cudaStream_t stream) {
  return copySymbol(symbol, dst, count, offset, kind, stream, false, false);
}

TALLY_API cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  return guardRuntime(__func__, [&] {
    if (devPtr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr address = 0;
    size_t size = 0;
    CUresult r = symbolAddress(symbol, address, size);
    *devPtr = reinterpret_cast<void*>(address);
    return r;
  });
}

TALLY_API cudaError_t cudaGetSymbolSize(size_t* size, const void* symbol) {
  return guardRuntime(__func__, [&] {
    if (size == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr address = 0;
    return symbolAddress(symbol, address, *size);
  });
}

TALLY_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  return guardRuntime(__func__, [&] {
    if (attr == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
    describePointer(ptr, *attr);
    return CUDA_SUCCESS;
  });
}

// --- driver ------------------------------------------------------------------------------------

TALLY_API CUresult cuMemAlloc(CUdeviceptr* ptr, size_t size) {
  return guardDriver(__func__, [&] { return size == 0 ? CUDA_ERROR_INVALID_VALUE : allocateDevice(ptr, size); });
}

TALLY_API CUresult cuMemAllocPitch(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height, unsigned int) {
  return guardDriver(__func__, [&] { return allocatePitch(ptr, pitch, width, height); });
}

TALLY_API CUresult cuMemFree(CUdeviceptr ptr) {
  return guardDriver(__func__, [&] { return freeDevice(ptr); });
}

TALLY_API CUresult cuMemAllocHost(void** ptr, size_t size) {
  return guardDriver(__func__, [&] { return allocateHost(ptr, size); });
}

TALLY_API CUresult cuMemHostAlloc(void** ptr, size_t size, unsigned int flags) {
  return guardDriver(__func__, [&] { return allocateHost(ptr, size, flags); });
}

TALLY_API CUresult cuMemFreeHost(void* ptr) {
  return guardDriver(__func__, [&] { return freeHost(ptr); });
}

TALLY_API CUresult cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  return guardDriver(__func__, [&] {
    auto region = rt().findDeviceRegion(ptr);
    if (!region) return CUDA_ERROR_NOT_FOUND;
    if (base != nullptr) *base = region->first;
    if (size != nullptr) *size = region->second.size;
    return CUDA_SUCCESS;
  });
}

TALLY_API CUresult cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t count) {
  return guardDriver(__func__, [&] { return copy1D(reinterpret_cast<void*>(dst), src, count, cudaMemcpyHostToDevice, nullptr, true); });
}

TALLY_API CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t count, CUstream stream) {
  return guardDriver(__func__, [&] { return copy1D(reinterpret_cast<void*>(dst), src, count, cudaMemcpyHostToDevice, stream, false); });
}

TALLY_API CUresult cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t count) {
  return guardDriver(__func__, [&] { return copy1D(dst, reinterpret_cast<void*>(src), count, cudaMemcpyDeviceToHost, nullptr, true); });
}

TALLY_API CUresult cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t count, CUstream stream) {
  return guardDriver(__func__, [&] { return copy1D(dst, reinterpret_cast<void*>(src), count, cudaMemcpyDeviceToHost, stream, false); });
}

TALLY_API CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t count) {
  return guardDriver(__func__, [&] {
    return copy1D(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), count, cudaMemcpyDeviceToDevice, nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t count, CUstream stream) {
  return guardDriver(__func__, [&] {
    return copy1D(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), count, cudaMemcpyDeviceToDevice, stream, false);
  });
}

// Peer copies between contexts: the pointers name their devices (unified addressing).
TALLY_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src, CUcontext srcContext,
                                size_t count) {
  return guardDriver(__func__, [&] {
    if (dstContext == nullptr || srcContext == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    return copy1D(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), count, cudaMemcpyDeviceToDevice, nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src, CUcontext srcContext,
                                     size_t count, CUstream stream) {
  return guardDriver(__func__, [&] {
    if (dstContext == nullptr || srcContext == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    return copy1D(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), count, cudaMemcpyDeviceToDevice, stream, false);
  });
}

TALLY_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t count) {
  return guardDriver(__func__, [&] {
    return copy1D(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), count, cudaMemcpyDefault, nullptr, true);
  });
}

TALLY_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t count, CUstream stream) {
  return guardDriver(__func__, [&] {
    return copy1D(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), count, cudaMemcpyDefault, stream, false);
  });
}

TALLY_API CUresult cuMemcpy2D(const CUDA_MEMCPY2D* p) {
  return guardDriver(__func__, [&] { return copyDescriptor(p, nullptr, true); });
}
TALLY_API CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D* p) {
  return guardDriver(__func__, [&] { return copyDescriptor(p, nullptr, true); });
}
TALLY_API CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D* p, CUstream stream) {
  return guardDriver(__func__, [&] { return copyDescriptor(p, stream, false); });
}

TALLY_API CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n) {
  return guardDriver(__func__, [&] { return memset(dst, value, 1, n, 1, n, nullptr); });
}
TALLY_API CUresult cuMemsetD16(CUdeviceptr dst, unsigned short value, size_t n) {
  return guardDriver(__func__, [&] { return memset(dst, value, 2, n, 1, 2 * n, nullptr); });
}
TALLY_API CUresult cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t n) {
  return guardDriver(__func__, [&] { return memset(dst, value, 4, n, 1, 4 * n, nullptr); });
}
TALLY_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  return guardDriver(__func__, [&] { return memset(dst, value, 1, n, 1, n, stream); });
}
TALLY_API CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t n, CUstream stream) {
  return guardDriver(__func__, [&] { return memset(dst, value, 2, n, 1, 2 * n, stream); });
}
TALLY_API CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream) {
  return guardDriver(__func__, [&] { return memset(dst, value, 4, n, 1, 4 * n, stream); });
}

TALLY_API CUresult cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height) {
  return guardDriver(__func__, [&] { return memset(dst, value, 1, width, height, pitch, nullptr); });
}
TALLY_API CUresult cuMemsetD2D16(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height) {
  return guardDriver(__func__, [&] { return memset(dst, value, 2, width, height, pitch, nullptr); });
}
TALLY_API CUresult cuMemsetD2D32(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height) {
  return guardDriver(__func__, [&] { return memset(dst, value, 4, width, height, pitch, nullptr); });
}
TALLY_API CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,
                                     CUstream stream) {
  return guardDriver(__func__, [&] { return memset(dst, value, 1, width, height, pitch, stream); });
}
TALLY_API CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short value, size_t width, size_t height,
                                      CUstream stream) {
  return guardDriver(__func__, [&] { return memset(dst, value, 2, width, height, pitch, stream); });
}
TALLY_API CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height,
                                      CUstream stream) {
  return guardDriver(__func__, [&] { return memset(dst, value, 4, width, height, pitch, stream); });
}

TALLY_API CUresult cuMemHostGetFlags(unsigned int* flags, void* host) {
  return static_cast<CUresult>(cudaHostGetFlags(flags, host));
}

TALLY_API CUresult cuMemHostGetDevicePointer(CUdeviceptr* device, void* host, unsigned int flags) {
  return static_cast<CUresult>(cudaHostGetDevicePointer(reinterpret_cast<void**>(device), host, flags));
}

namespace {

// One attribute of a pointer the client knows (`attr` and `range` from describePointer).
CUresult pointerAttribute(const cudaPointerAttributes& attr, const PointerRange& range, CUpointer_attribute attribute,
                          void* data) {
  auto asUnsigned = [&](unsigned v) {
    *static_cast<unsigned*>(data) = v;
    return CUDA_SUCCESS;
  };
  auto asWord = [&](uint64_t v) {
    *static_cast<uint64_t*>(data) = v;
    return CUDA_SUCCESS;
  };
  const bool device = attr.type == cudaMemoryTypeDevice;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: return asUnsigned(device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: return asWord(reinterpret_cast<CUdeviceptr>(attr.devicePointer));
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return asWord(reinterpret_cast<uintptr_t>(attr.hostPointer));
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return asUnsigned(static_cast<unsigned>(attr.device));
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: return asUnsigned(attr.type == cudaMemoryTypeManaged ? 1 : 0);
    case CU_POINTER_ATTRIBUTE_CONTEXT: return cuDevicePrimaryCtxRetain(static_cast<CUcontext*>(data), attr.device);
    // What every allocation the client knows is: mapped, read-write, whole; the base names it.
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: return asWord(range.base);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: return asWord(range.size);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: return asWord(range.base);
    case CU_POINTER_ATTRIBUTE_MAPPED: return asUnsigned(1);
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return asUnsigned(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
      return asUnsigned(0);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// The bytes cuPointerGetAttributes writes for `attribute` (its default for an unknown pointer).
size_t pointerAttributeBytes(CUpointer_attribute attribute) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
      return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
    default:
      return sizeof(int);
  }
}

}  // namespace

TALLY_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  return guardDriver(__func__, [&] {
    if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
    cudaPointerAttributes attr;
    PointerRange range;
    describePointer(reinterpret_cast<const void*>(ptr), attr, &range);
    if (attr.type == cudaMemoryTypeUnregistered) return CUDA_ERROR_INVALID_VALUE;
    return pointerAttribute(attr, range, attribute, data);
  });
}

// Unlike the singular call, a pointer the driver does not know is no error: every attribute gets
// its zero default. An attribute the client cannot answer is NotSupported, as in the singular.
TALLY_API CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute* attributes, void** data,
                                         CUdeviceptr ptr) {
  return guardDriver(__func__, [&] {
    if (count == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
    cudaPointerAttributes attr;
    PointerRange range;
    describePointer(reinterpret_cast<const void*>(ptr), attr, &range);
    for (unsigned i = 0; i < count; ++i) {
      if (data[i] == nullptr) continue;
      if (attr.type == cudaMemoryTypeUnregistered) {
        std::memset(data[i], 0, pointerAttributeBytes(attributes[i]));
        continue;
      }
      if (CUresult r = pointerAttribute(attr, range, attributes[i], data[i]); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  });
}
