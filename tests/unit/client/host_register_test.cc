// cudaHostRegister / cuMemHostRegister against the fake tallyd (client/api/host_register.cc).
// Built twice: TALLY_TEST_SHARED 1, the fake maps client memfds (a Unix socket to tallyd): the
// registered pages move into shared memory at the same addresses, contents kept, and move back
// at unregister; TALLY_TEST_SHARED 0 (as over TCP), registration is recorded only and there is
// no device pointer. The error codes are the same either way.
#include "client/runtime/page_move.h"
#include "fake_tallyd.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace {

using tally::testing::FakeTallyd;
namespace page_move = tally::client::page_move;

FakeTallyd* const server = [] {
  FakeTallyd* s = &tally::testing::processFakeTallyd();
  s->offerSharedHostMemory(TALLY_TEST_SHARED != 0);
  return s;
}();

constexpr size_t kPage = 4096;

[[maybe_unused]] std::optional<FakeTallyd::HostMapping> mappingAt(uint64_t clientAddress) {
  for (const auto& m : server->hostMappings()) {
    if (m.clientAddress == clientAddress) return m;
  }
  return std::nullopt;
}

[[maybe_unused]] uintptr_t pageOf(const void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kPage - 1); }

// A heap buffer with a pattern; the registered range starts 10 bytes in (not page-aligned).
struct Buffer {
  explicit Buffer(size_t bytes) : size(bytes), base(static_cast<char*>(std::malloc(bytes + 10))) {
    for (size_t i = 0; i < bytes + 10; ++i) base[i] = static_cast<char>(i * 7 + 1);
  }
  ~Buffer() { std::free(base); }
  char* start() const { return base + 10; }
  bool patternIntact() const {
    for (size_t i = 0; i < size + 10; ++i) {
      if (base[i] != static_cast<char>(i * 7 + 1)) return false;
    }
    return true;
  }
  size_t size;
  char* base;
};

TEST(HostRegister, ArgumentsAreChecked) {
  Buffer b(3 * kPage);
  EXPECT_EQ(cudaHostRegister(nullptr, 100, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostRegister(b.start(), 0, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostRegister(b.start(), 100, 0x100), cudaErrorInvalidValue);  // unknown flag
  EXPECT_EQ(cudaHostUnregister(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostUnregister(b.start()), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cuMemHostRegister(nullptr, 100, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemHostUnregister(b.start()), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  cudaGetLastError();
}

TEST(HostRegister, OverlapsAreAlreadyRegisteredAndOnlyTheBaseUnregisters) {
  Buffer b(3 * kPage);
  ASSERT_EQ(cudaHostRegister(b.start(), b.size, cudaHostRegisterDefault), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(b.start(), b.size, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostRegister(b.start() + 100, 8, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostRegister(b.base, 4, 0), cudaErrorHostMemoryAlreadyRegistered);  // same page
  EXPECT_EQ(cudaHostUnregister(b.start() + 100), cudaErrorInvalidValue);  // inside it (as the H200's driver)
  EXPECT_EQ(cudaFreeHost(b.start()), cudaErrorInvalidValue);  // the application's memory
  unsigned flags = 0;
  EXPECT_EQ(cudaHostGetFlags(&flags, b.start()), cudaSuccess);  // registered memory has flags (as natively)
  EXPECT_EQ(cudaHostUnregister(b.start()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(b.start()), cudaErrorHostMemoryNotRegistered);
  EXPECT_TRUE(b.patternIntact());
  cudaGetLastError();
}

TEST(HostRegister, PinnedMemoryIsAlreadyRegistered) {
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 1000), cudaSuccess);
  EXPECT_EQ(cudaHostRegister(pinned, 1000, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostUnregister(pinned), cudaErrorHostMemoryNotRegistered);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  cudaGetLastError();
}

TEST(HostRegister, DriverEntryPoints) {
  Buffer b(2 * kPage);
  ASSERT_EQ(cuMemHostRegister(b.start(), b.size, CU_MEMHOSTREGISTER_DEVICEMAP), CUDA_SUCCESS);
  EXPECT_EQ(cuMemHostRegister(b.start(), b.size, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  CUdeviceptr device = 0;
  CUresult pointer = cuMemHostGetDevicePointer(&device, b.start(), 0);
  EXPECT_EQ(pointer, TALLY_TEST_SHARED ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemHostUnregister(b.start()), CUDA_SUCCESS);
  EXPECT_TRUE(b.patternIntact());
}

#if TALLY_TEST_SHARED

TEST(HostRegister, PagesMoveIntoSharedMemoryAtTheSameAddressesAndBack) {
  Buffer b(5 * kPage);
  char* p = b.start();
  uintptr_t first = pageOf(p);
  ASSERT_EQ(cudaHostRegister(p, b.size, cudaHostRegisterMapped), cudaSuccess);
  EXPECT_TRUE(b.patternIntact());  // contents kept, address unchanged (also the bytes around it)
  auto mapping = mappingAt(first);
  ASSERT_TRUE(mapping.has_value());
  EXPECT_EQ(mapping->size, page_move::pagesOf(p, b.size).size());
  EXPECT_TRUE(page_move::isSharedMemfdMapping(page_move::selfMaps(), first, first + mapping->size));
  // The same memory: what the application writes, tallyd's mapping sees.
  EXPECT_EQ(std::memcmp(mapping->local + (p - reinterpret_cast<char*>(first)), p, b.size), 0);
  p[1] = 42;
  EXPECT_EQ(mapping->local[p + 1 - reinterpret_cast<char*>(first)], 42);
  p[1] = static_cast<char>(11 * 7 + 1);

  void* device = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&device, p + 5, 0), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uint64_t>(device),
            FakeTallyd::kFakeHostDeviceBase + (first & 0xffffffffull) + (reinterpret_cast<uintptr_t>(p) + 5 - first));
  EXPECT_EQ(cudaHostGetDevicePointer(&device, p, 1), cudaErrorInvalidValue);  // flags must be 0
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, p), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);

  // A copy into it lands through the shared mapping, not as bytes on the socket.
  void* source = nullptr;
  ASSERT_EQ(cudaMalloc(&source, 64), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(p + 100, source, 64, cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(std::all_of(p + 100, p + 164, [](char c) { return c == static_cast<char>(0xAB); }));
  ASSERT_EQ(cudaMemcpyAsync(source, p, 64, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  ASSERT_EQ(cudaHostUnregister(p), cudaSuccess);
  EXPECT_FALSE(mappingAt(first).has_value());  // tallyd let go
  EXPECT_FALSE(page_move::isSharedMemfdMapping(page_move::selfMaps(), first, first + kPage));  // private again
  EXPECT_TRUE(std::all_of(p + 100, p + 164, [](char c) { return c == static_cast<char>(0xAB); }));  // still valid
  for (size_t i = 100; i < 164; ++i) b.base[i + 10] = static_cast<char>((i + 10) * 7 + 1);
  EXPECT_TRUE(b.patternIntact());
  EXPECT_EQ(cudaFree(source), cudaSuccess);
}

TEST(HostRegister, FileBackedMemoryIsRegisteredWithoutMoving) {
  char path[] = "/tmp/tally-host-register-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, 2 * kPage), 0);
  void* file = ::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ASSERT_NE(file, MAP_FAILED);
  ::close(fd);
  static_cast<char*>(file)[7] = 3;
  ASSERT_EQ(cudaHostRegister(file, 2 * kPage, cudaHostRegisterMapped), cudaSuccess);
  EXPECT_FALSE(mappingAt(reinterpret_cast<uintptr_t>(file)).has_value());
  EXPECT_EQ(static_cast<char*>(file)[7], 3);
  void* device = nullptr;
  EXPECT_EQ(cudaHostGetDevicePointer(&device, file, 0), cudaErrorNotSupported);
  EXPECT_EQ(cudaHostUnregister(file), cudaSuccess);
  ::munmap(file, 2 * kPage);
  cudaGetLastError();
}

#else

TEST(HostRegister, WithoutSharingNothingIsMovedAndThereIsNoDevicePointer) {
  Buffer b(2 * kPage);
  size_t before = server->hostMappings().size();
  ASSERT_EQ(cudaHostRegister(b.start(), b.size, cudaHostRegisterMapped), cudaSuccess);
  EXPECT_EQ(server->hostMappings().size(), before);
  EXPECT_EQ(server->callsOf(tally::wire::Call::HOST_REGISTER), 0u);
  void* device = nullptr;
  EXPECT_EQ(cudaHostGetDevicePointer(&device, b.start(), 0), cudaErrorNotSupported);
  // Copies still work (through the socket; the fake answers only waited-for copies with bytes).
  void* source = nullptr;
  ASSERT_EQ(cudaMalloc(&source, 64), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(b.start(), source, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::all_of(b.start(), b.start() + 64, [](char c) { return c == static_cast<char>(0xAB); }));
  EXPECT_EQ(cudaHostUnregister(b.start()), cudaSuccess);
  EXPECT_EQ(cudaFree(source), cudaSuccess);
  cudaGetLastError();
}

#endif

// /proc/self/maps as page_move reads it.
constexpr char kMaps[] =
    "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/app\n"
    "00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/app\n"
    "00652000-00700000 rw-p 00000000 00:00 0           [heap]\n"
    "00700000-00800000 rw-p 00000000 00:00 0 \n"
    "00800000-00900000 rw-s 00000000 00:01 77          /memfd:tally-host (deleted)\n"
    "00900000-00a00000 rw-s 00000000 00:01 78          /dev/zero (deleted)\n"
    "00a00000-00b00000 r--p 00000000 00:00 0 \n"
    "7ffd0000-7ffe0000 rw-p 00000000 00:00 0           [stack]\n";

TEST(PageMove, OnlyPrivateAnonymousReadWriteMemoryMoves) {
  EXPECT_EQ(page_move::movableProblem(kMaps, 0x00660000, 0x00680000), "");      // heap
  EXPECT_EQ(page_move::movableProblem(kMaps, 0x00680000, 0x00780000), "");      // heap and anonymous
  EXPECT_NE(page_move::movableProblem(kMaps, 0x00651000, 0x00652000).find("/usr/bin/app"), std::string::npos);
  EXPECT_NE(page_move::movableProblem(kMaps, 0x00780000, 0x00801000), "");      // into a shared file
  EXPECT_NE(page_move::movableProblem(kMaps, 0x00900000, 0x00901000), "");      // shared /dev/zero
  EXPECT_NE(page_move::movableProblem(kMaps, 0x00a00000, 0x00a01000).find("r--p"), std::string::npos);
  EXPECT_NE(page_move::movableProblem(kMaps, 0x7ffd0000, 0x7ffd1000).find("[stack]"), std::string::npos);
  EXPECT_EQ(page_move::movableProblem(kMaps, 0x00b00000, 0x00b01000), "part of it is not mapped");
  EXPECT_EQ(page_move::movableProblem(kMaps, 0x00452000, 0x00651000), "part of it is not mapped");
}

TEST(PageMove, SharedMemfdMappingsAreRecognized) {
  EXPECT_TRUE(page_move::isSharedMemfdMapping(kMaps, 0x00800000, 0x00900000));
  EXPECT_FALSE(page_move::isSharedMemfdMapping(kMaps, 0x00800000, 0x00901000));
  EXPECT_FALSE(page_move::isSharedMemfdMapping(kMaps, 0x00700000, 0x00701000));
}

TEST(PageMove, PagesOfAnUnalignedRange) {
  auto r = page_move::pagesOf(reinterpret_cast<void*>(0x1010), 0x1000);
  EXPECT_EQ(r.begin, 0x1000u);
  EXPECT_EQ(r.end, 0x3000u);
}

}  // namespace
