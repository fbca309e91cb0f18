// host_memory: unreadable and unwritable application memory is reported, never touched.
#include "client/transport/host_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace tally::client::host_memory {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

// Three pages; the middle one gets `middle` protection.
struct Mapping {
  char* base;
  explicit Mapping(int middle) {
    base = static_cast<char*>(::mmap(nullptr, 3 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ::mprotect(base + kPage, kPage, middle);
  }
  ~Mapping() { ::munmap(base, 3 * kPage); }
};

TEST(HostMemory, OrdinaryMemoryIsReadableAndWritable) {
  Mapping m(PROT_READ | PROT_WRITE);
  std::memset(m.base, 7, 3 * kPage);
  EXPECT_TRUE(readable(m.base, 3 * kPage));
  EXPECT_TRUE(writable(m.base, 3 * kPage));
  EXPECT_EQ(m.base[kPage], 7);  // the write probe put back what was there
}

TEST(HostMemory, ProtNonePageIsNeitherReadableNorWritable) {
  Mapping m(PROT_NONE);
  EXPECT_FALSE(readable(m.base, 3 * kPage));
  EXPECT_FALSE(writable(m.base, 3 * kPage));
  EXPECT_FALSE(readable(m.base + kPage + 100, 1));
  EXPECT_TRUE(readable(m.base, kPage));  // the first page alone is fine
}

TEST(HostMemory, ReadOnlyPageIsReadableButNotWritable) {
  Mapping m(PROT_READ);
  EXPECT_TRUE(readable(m.base, 3 * kPage));
  EXPECT_FALSE(writable(m.base, 3 * kPage));
  EXPECT_FALSE(writable(m.base + 2 * kPage - 1, 1));
}

TEST(HostMemory, RowsProbeOnlyTheirBytesNotTheGaps) {
  Mapping m(PROT_NONE);
  // Two rows of 16 bytes, three pages apart... the gap (the middle page) is never touched.
  Rows rows{m.base + kPage - 16, 16, kPage + 16, 2};
  EXPECT_TRUE(readable(rows));
  EXPECT_TRUE(writable(rows));
  rows.width = 17;  // now the first row reaches into the protected page
  EXPECT_FALSE(readable(rows));
}

TEST(HostMemory, NullAndWrappingRangesAreRefused) {
  EXPECT_FALSE(readable(nullptr, 4));
  EXPECT_FALSE(readable(reinterpret_cast<void*>(UINTPTR_MAX - 3), 16));
  EXPECT_FALSE(writable(Rows{reinterpret_cast<void*>(4096), 8, SIZE_MAX / 2, 3}));
  EXPECT_TRUE(readable(nullptr, 0));  // nothing to read
}

TEST(HostMemory, ManyPagesAreProbedInBatches) {
  const size_t pages = 3000;  // more than IOV_MAX probes
  auto* big = static_cast<char*>(::mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(big, MAP_FAILED);
  EXPECT_TRUE(readable(big, pages * kPage));
  ::mprotect(big + 2500 * kPage, kPage, PROT_NONE);  // in the third batch
  EXPECT_FALSE(readable(big, pages * kPage));
  ::munmap(big, pages * kPage);
}

TEST(HostMemory, CopyOutReportsAnUnwritableDestination) {
  Mapping m(PROT_READ);
  const char bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(copyOut(m.base, bytes, sizeof(bytes)));
  EXPECT_EQ(std::memcmp(m.base, bytes, sizeof(bytes)), 0);
  EXPECT_FALSE(copyOut(m.base + kPage, bytes, sizeof(bytes)));
  EXPECT_FALSE(copyOut(m.base + kPage - 4, bytes, sizeof(bytes)));  // straddles into it
}

// The client's copies of pageable application memory (staging ring, packed rows) go through
// copyIn: a hole in the middle of the source is an error, not a signal.
TEST(HostMemory, CopyInReportsAHoleInTheSource) {
  Mapping m(PROT_NONE);  // readable, hole, readable
  std::vector<char> into(3 * kPage);
  EXPECT_TRUE(copyIn(into.data(), m.base, kPage));
  EXPECT_FALSE(copyIn(into.data(), m.base, 3 * kPage));
  EXPECT_TRUE(copyIn(into.data(), m.base + 2 * kPage, kPage));
}

// A small copy to or from pages an earlier copy went through is a plain memcpy; a page never
// seen, or a copy too large to gain from it, goes through the kernel.
TEST(HostMemory, SmallCopiesToKnownPagesSkipTheKernel) {
  std::vector<char> buffer(2 * kPage);
  const char bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t before = kernelCopiesSoFar();
  EXPECT_TRUE(copyOut(buffer.data() + 16, bytes, sizeof(bytes)));
  EXPECT_EQ(kernelCopiesSoFar(), before + 1);
  EXPECT_TRUE(copyOut(buffer.data() + 32, bytes, sizeof(bytes)));  // same page: no system call
  EXPECT_EQ(kernelCopiesSoFar(), before + 1);
  EXPECT_EQ(std::memcmp(buffer.data() + 32, bytes, sizeof(bytes)), 0);
  char back[8] = {};
  EXPECT_TRUE(copyIn(back, buffer.data() + 32, sizeof(back)));  // reads are remembered apart
  EXPECT_TRUE(copyIn(back, buffer.data() + 32, sizeof(back)));
  EXPECT_EQ(kernelCopiesSoFar(), before + 2);
  std::vector<char> large(128u << 10);
  EXPECT_TRUE(copyOut(large.data(), large.data() + 1, 1));
  EXPECT_TRUE(copyIn(large.data() + 1, large.data(), large.size() - 1));
  EXPECT_TRUE(copyIn(large.data() + 1, large.data(), large.size() - 1));
  EXPECT_EQ(kernelCopiesSoFar(), before + 5) << "a 128 KiB copy is never taken as known";
}

// A page the client never copied through still gets an error code, not a signal.
TEST(HostMemory, UnknownBadPagesStillFailWithoutASignal) {
  Mapping m(PROT_NONE);
  const char bytes[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_TRUE(copyOut(m.base, bytes, sizeof(bytes)));
  EXPECT_FALSE(copyOut(m.base + kPage, bytes, sizeof(bytes)));
  EXPECT_FALSE(copyOut(m.base + kPage, bytes, sizeof(bytes)));  // a failure is not remembered
}

}  // namespace
}  // namespace tally::client::host_memory
