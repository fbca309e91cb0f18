// Argument checks of the copy and memset families: the native error for bad sizes and pointers.
#include "client/runtime/argument_checks.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace tally::client {
namespace {

constexpr uint64_t kDevice = 0x7f0000000000;

Copy2D flat(uint64_t dst, uint64_t src, size_t bytes) { return Copy2D{dst, bytes, src, bytes, bytes, 1}; }

TEST(CopyShape, AcceptsOrdinaryCopies) {
  EXPECT_EQ(checkCopyShape(flat(kDevice, 0x1000, 4096)), CUDA_SUCCESS);
  EXPECT_EQ(checkCopyShape(Copy2D{kDevice, 512, 0x1000, 256, 256, 100}), CUDA_SUCCESS);
}

TEST(CopyShape, NullAddressesAreInvalidValue) {
  EXPECT_EQ(checkCopyShape(flat(kDevice, 0, 4)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkCopyShape(flat(0, 0x1000, 4)), CUDA_ERROR_INVALID_VALUE);
}

TEST(CopyShape, PitchBelowWidthIsInvalidPitchValue) {
  EXPECT_EQ(checkCopyShape(Copy2D{kDevice, 100, 0x1000, 256, 256, 2}), static_cast<CUresult>(cudaErrorInvalidPitchValue));
}

TEST(CopyShape, OverflowingPitchTimesHeightIsInvalidValue) {
  // pitch * (height - 1) + width wraps to a small number without the check.
  EXPECT_EQ(checkCopyShape(Copy2D{kDevice, SIZE_MAX / 2 + 1, 0x1000, 64, 64, 3}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkCopyShape(Copy2D{kDevice, 64, 0x1000, SIZE_MAX / 2, 64, 4}), CUDA_ERROR_INVALID_VALUE);
}

TEST(CopyShape, RangesWrappingTheAddressSpaceAreInvalidValue) {
  EXPECT_EQ(checkCopyShape(flat(UINT64_MAX - 10, 0x1000, 64)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkCopyShape(flat(kDevice, 0x1000, SIZE_MAX)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkCopyShape(flat(UINT64_MAX - 63, 0x1000, 64)), CUDA_SUCCESS);  // ends at the last byte
}

TEST(HostRows, NullUnreadableAndUnwritableHostMemoryAreInvalidValue) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* none = ::mmap(nullptr, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* readOnly = ::mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  auto at = [](void* p) { return reinterpret_cast<uint64_t>(p); };
  EXPECT_EQ(checkHostRows(0, 4, 4, 1, HostAccess::kRead), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkHostRows(at(none), 4, 4, 1, HostAccess::kRead), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkHostRows(at(readOnly), 4, 4, 1, HostAccess::kRead), CUDA_SUCCESS);
  EXPECT_EQ(checkHostRows(at(readOnly), 4, 4, 1, HostAccess::kWrite), CUDA_ERROR_INVALID_VALUE);
  std::vector<char> ordinary(page);
  EXPECT_EQ(checkHostRows(at(ordinary.data()), page, page, 1, HostAccess::kWrite), CUDA_SUCCESS);
  ::munmap(none, page);
  ::munmap(readOnly, page);
}

TEST(HostRows, AFlatRangeIsRefusedWhenItsLastByteIsNotThere) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto* two = static_cast<char*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ::mprotect(two + page, page, PROT_NONE);
  auto at = [](const char* p) { return reinterpret_cast<uint64_t>(p); };
  EXPECT_EQ(checkHostRows(at(two), page, page, 1, HostAccess::kWrite), CUDA_SUCCESS);
  EXPECT_EQ(checkHostRows(at(two), page + 1, page + 1, 1, HostAccess::kWrite), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkHostRows(at(two + 10), page, page, 1, HostAccess::kRead), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkHostRows(at(two + page - 1), 1, 1, 1, HostAccess::kRead), CUDA_SUCCESS);  // one byte
  EXPECT_EQ(checkHostRows(at(two + page), 1, 1, 1, HostAccess::kRead), CUDA_ERROR_INVALID_VALUE);
  ::munmap(two, 2 * page);
}

TEST(MemsetShape, AcceptsOrdinaryMemsets) {
  EXPECT_EQ(checkMemsetShape({kDevice, 4, 1024, 1, 4096}), CUDA_SUCCESS);
  EXPECT_EQ(checkMemsetShape({kDevice, 1, 100, 10, 128}), CUDA_SUCCESS);
}

TEST(MemsetShape, OverflowingWidthTimesElementSizeIsInvalidValue) {
  // cuMemsetD32(dst, v, 2^62): 2^62 * 4 wraps to 0 bytes without the check.
  EXPECT_EQ(checkMemsetShape({kDevice, 4, size_t{1} << 62, 1, 0}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkMemsetShape({kDevice, 2, SIZE_MAX / 2 + 1, 1, 0}), CUDA_ERROR_INVALID_VALUE);
}

TEST(MemsetShape, OverflowingPitchTimesHeightIsInvalidValue) {
  EXPECT_EQ(checkMemsetShape({kDevice, 1, 64, 3, SIZE_MAX / 2 + 1}), CUDA_ERROR_INVALID_VALUE);
}

TEST(MemsetShape, NullMisalignedAndShortPitchAreInvalidValue) {
  EXPECT_EQ(checkMemsetShape({0, 1, 16, 1, 16}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkMemsetShape({kDevice + 2, 4, 16, 1, 64}), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(checkMemsetShape({kDevice, 4, 16, 2, 32}), CUDA_ERROR_INVALID_VALUE);  // row is 64 bytes
  EXPECT_EQ(checkMemsetShape({kDevice, 3, 16, 1, 48}), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace tally::client
