// Memory family, registration of the application's own host memory (cudaHostRegister,
// cuMemHostRegister). Over a Unix socket the registered pages are moved into a memfd shared
// with tallyd, at the same addresses (client/runtime/page_move.h), and mapped and registered by
// tallyd like cudaMallocHost memory: copies from and to them are DMA in stream order and the
// memory has a device pointer. Over TCP/TLS, or for memory that cannot be moved (file-backed,
// shared, stack, read-only mappings), the registration is recorded only: copies travel through
// the socket as they would from pageable memory (asynchronous ones stay asynchronous), and
// cudaHostGetDevicePointer answers cudaErrorNotSupported, naming why.
//
// Unregistering tells tallyd to let go of its mapping and moves the pages back into private
// anonymous memory (contents kept), so the memory stays valid as natively and the file is freed;
// where the application unmapped or replaced the range meanwhile, it is left as it is.
#include "client/api/api_util.h"
#include "client/runtime/page_move.h"

#include <unistd.h>

#include <mutex>

using namespace tally::client;

namespace {

ClientRuntime& rt() { return ClientRuntime::get(); }

constexpr unsigned kKnownRegisterFlags =
    cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;

// Registrations change the host-region table in two steps (check, then add or remove) around a
// round trip; one at a time.
std::mutex& registrationMutex() {
  static std::mutex mutex;
  return mutex;
}

// The registration whose application pointer is `base`, with the region's key.
std::optional<std::pair<uintptr_t, HostRegion>> registrationAt(const void* base) {
  auto found = rt().findHostRegion(base);
  if (!found || !found->second.registered || found->second.userBase != reinterpret_cast<uintptr_t>(base)) return std::nullopt;
  return found;
}

// Moves `pages` into shared memory and has tallyd map them; the device address, or nullopt with
// `why` (and the pages where they were).
std::optional<uint64_t> shareWithTallyd(page_move::PageRange pages, std::string& why) {
  if (std::string problem = page_move::movableProblem(page_move::selfMaps(), pages.begin, pages.end); !problem.empty()) {
    why = problem;
    return std::nullopt;
  }
  int fd = page_move::moveToMemfd(pages, why);
  if (fd < 0) return std::nullopt;
  ReplyMessage reply;
  CUresult r = rt().call([&](wire::Call::Builder c) {
    auto reg = c.initHostRegister();
    reg.setClientAddress(pages.begin);
    reg.setSize(pages.size());
  }, &reply, {}, fd);
  ::close(fd);
  if (r == CUDA_SUCCESS) return reply.reply().getValue();
  why = fmt::format("tallyd did not map it (CUresult {})", static_cast<int>(r));
  std::string error;
  if (!page_move::moveToAnonymous(pages, error)) {
    spdlog::warn("tally: registered memory at 0x{:x} stays in a private shared file: {}", pages.begin, error);
  }
  return std::nullopt;
}

CUresult registerHost(void* ptr, size_t size, unsigned flags) {
  if (ptr == nullptr || size == 0 || (flags & ~kKnownRegisterFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (reinterpret_cast<uintptr_t>(ptr) > UINTPTR_MAX - size) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & cudaHostRegisterIoMemory) != 0) {
    spdlog::warn("tally: cudaHostRegister with cudaHostRegisterIoMemory: I/O memory of this process cannot be "
                 "mapped by tallyd; not supported");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(registrationMutex());
  // The driver pins whole pages: a range sharing a page with registered or pinned memory is
  // already registered.
  page_move::PageRange pages = page_move::pagesOf(ptr, size);
  if (!rt().hostRegionsOverlapping(pages.begin, pages.end).empty()) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  HostRegion region;
  region.flags = flags;
  region.registered = true;
  region.userBase = reinterpret_cast<uintptr_t>(ptr);
  region.userSize = size;
  if (rt().sharedHostMemory()) {
    std::string why;
    if (std::optional<uint64_t> device = shareWithTallyd(pages, why)) {
      region.size = pages.size();
      region.shared = true;
      region.serverAddress = *device;
      rt().addHostRegion(reinterpret_cast<void*>(pages.begin), region);
      return CUDA_SUCCESS;
    }
    spdlog::warn("tally: cudaHostRegister of {} bytes at {}: not shared with tallyd, {}; copies from and to it travel "
                 "through the socket and it has no device pointer", size, ptr, why);
  }
  region.size = size;
  rt().addHostRegion(ptr, region);
  return CUDA_SUCCESS;
}

CUresult unregisterHost(void* ptr) {
  if (ptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = rt().ready(); r != CUDA_SUCCESS) return r;
  std::lock_guard lock(registrationMutex());
  auto found = registrationAt(ptr);
  if (!found) {
    // Measured on the H200 (driver 580): inside a registration but not its start is an invalid
    // value; outside every registration, not registered.
    auto inside = rt().findHostRegion(ptr);
    auto p = reinterpret_cast<uintptr_t>(ptr);
    bool within = inside && inside->second.registered && p >= inside->second.userBase &&
                  p - inside->second.userBase < inside->second.userSize;
    return within ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  auto [key, region] = *found;
  if (!region.shared) {
    rt().removeHostRegion(reinterpret_cast<void*>(key));
    return CUDA_SUCCESS;
  }
  CUresult r = rt().call([&](wire::Call::Builder c) { c.initHostUnregister().setClientAddress(key); });
  if (r != CUDA_SUCCESS) return r;  // still registered (a stream waits on a word in it)
  rt().removeHostRegion(reinterpret_cast<void*>(key));
  page_move::PageRange pages{key, key + region.size};
  if (!page_move::isSharedMemfdMapping(page_move::selfMaps(), pages.begin, pages.end)) return CUDA_SUCCESS;  // unmapped meanwhile
  std::string error;
  if (!page_move::moveToAnonymous(pages, error)) {
    spdlog::warn("tally: unregistered memory at {} stays in a private shared file: {}", ptr, error);
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace tally::client {

// memory.cc's cudaHostGetDevicePointer for registered memory: tallyd's device address when the
// pages are shared with it.
CUresult registeredDevicePointer(uintptr_t key, const HostRegion& region, const void* host, void** device) {
  if (!region.shared) {
    spdlog::warn("tally: cudaHostGetDevicePointer({}): the memory is registered but not shared with tallyd ({}), so "
                 "the GPU cannot reach it; not supported", host,
                 rt().sharedHostMemory() ? "it could not be moved: see the warning at its registration"
                                         : "the connection to tallyd is not a Unix socket");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (region.serverAddress == 0) return CUDA_ERROR_INVALID_VALUE;
  *device = reinterpret_cast<void*>(region.serverAddress + (reinterpret_cast<uintptr_t>(host) - key));
  return CUDA_SUCCESS;
}

}  // namespace tally::client

TALLY_API cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  return guardRuntime(__func__, [&] { return registerHost(ptr, size, flags); });
}

TALLY_API cudaError_t cudaHostUnregister(void* ptr) {
  return guardRuntime(__func__, [&] { return unregisterHost(ptr); });
}

// cuMemHostRegister is cuMemHostRegister_v2 in cuda.h; the flag values are the runtime's.
TALLY_API CUresult cuMemHostRegister(void* ptr, size_t size, unsigned int flags) {
  return guardDriver(__func__, [&] { return registerHost(ptr, size, flags); });
}

TALLY_API CUresult cuMemHostUnregister(void* ptr) {
  return guardDriver(__func__, [&] { return unregisterHost(ptr); });
}

#undef cuMemHostRegister
TALLY_API CUresult cuMemHostRegister(void* ptr, size_t size, unsigned int flags) {
  return guardDriver(__func__, [&] { return registerHost(ptr, size, flags); });
}
