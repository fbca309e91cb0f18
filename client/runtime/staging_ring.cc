#include "client/runtime/staging_ring.h"

#include "client/runtime/client_runtime.h"
#include "client/transport/host_memory.h"

#include <algorithm>
#include <cstring>

namespace tally::client {

std::unique_ptr<StagingRing> StagingRing::open(ClientRuntime& runtime) {
  void* base = nullptr;
  uint64_t serverAddress = 0;
  if (runtime.mapSharedHostMemory(kSlots * kSlotBytes, base, serverAddress) != CUDA_SUCCESS) return nullptr;
  return std::unique_ptr<StagingRing>(new StagingRing(runtime, static_cast<char*>(base)));
}

CUresult StagingRing::startPiece(size_t slot, bool toDevice, uint64_t device, size_t bytes, uint64_t stream) {
  auto host = reinterpret_cast<uint64_t>(base_ + slot * kSlotBytes);
  return runtime_.startCall(inFlight_[slot], [&](wire::Call::Builder c) {
    auto m = c.initMemcpy();
    m.setKind(toDevice ? wire::CopyKind::HOST_TO_DEVICE : wire::CopyKind::DEVICE_TO_HOST);
    m.setStream(stream);
    m.setDst(toDevice ? device : host);
    m.setSrc(toDevice ? host : device);
    m.setWidth(bytes);
    m.setHeight(1);
    m.setHostShared(true);
  });
}

std::optional<CUresult> StagingRing::toDevice(uint64_t dst, const char* src, size_t bytes, uint64_t stream) {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return pipeline(bytes, [&](size_t slot, size_t offset, size_t length) {
    // The application's bytes: a hole in them fails the copy instead of raising a signal.
    if (!host_memory::copyIn(base_ + slot * kSlotBytes, src + offset, length)) return CUDA_ERROR_INVALID_VALUE;
    return startPiece(slot, true, dst + offset, length, stream);
  }, [](size_t, size_t, size_t) { return true; });
}

std::optional<CUresult> StagingRing::toHost(char* dst, uint64_t src, size_t bytes, uint64_t stream) {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  return pipeline(bytes, [&](size_t slot, size_t offset, size_t length) {
    return startPiece(slot, false, src + offset, length, stream);
  }, [&](size_t slot, size_t offset, size_t length) {
    return host_memory::copyOut(dst + offset, base_ + slot * kSlotBytes, length);
  });
}

CUresult StagingRing::pipeline(size_t bytes, const std::function<CUresult(size_t, size_t, size_t)>& start,
                               const std::function<bool(size_t, size_t, size_t)>& landed) {
  struct Piece {
    bool busy = false;
    size_t offset = 0;
    size_t length = 0;
  };
  std::array<Piece, kSlots> pieces{};
  CUresult result = CUDA_SUCCESS;
  // Waits for the piece in `slot`, if any, and hands its bytes over.
  auto drain = [&](size_t slot) {
    Piece& p = pieces[slot];
    if (!p.busy) return;
    p.busy = false;
    CUresult r = runtime_.finishCall(inFlight_[slot]);
    if (result == CUDA_SUCCESS) result = r;
    if (r == CUDA_SUCCESS && !landed(slot, p.offset, p.length) && result == CUDA_SUCCESS) {
      result = CUDA_ERROR_INVALID_VALUE;  // the application's destination could not be written
    }
  };
  size_t slot = 0;
  for (size_t offset = 0; offset < bytes && result == CUDA_SUCCESS; offset += kSlotBytes, slot = (slot + 1) % kSlots) {
    drain(slot);
    if (result != CUDA_SUCCESS) break;
    size_t length = std::min(kSlotBytes, bytes - offset);
    if (CUresult r = start(slot, offset, length); r != CUDA_SUCCESS) {
      result = r;
      break;
    }
    pieces[slot] = Piece{true, offset, length};
  }
  for (size_t i = 0; i < kSlots; ++i) drain((slot + i) % kSlots);  // oldest first
  return result;
}

}  // namespace tally::client
