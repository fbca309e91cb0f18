// HostMappingTable: the seal check on a client's memfd (issue 13, finding 1), max_host_mappings
// (finding 15), lookups, and the words that keep a mapping. No GPU: every case here is decided
// before the driver would be asked.
#include "server/session/host_mapping_table.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

namespace tally::server::session {
namespace {

constexpr size_t kBytes = 8192;

// A memfd of `bytes`, sealed against shrinking when `seal`.
int memfd(size_t bytes, bool seal) {
  int fd = ::memfd_create("tally-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  if (seal) {
    EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  }
  return fd;
}

TEST(SharedFile, ASealedFileOfTheSizeIsAccepted) {
  int fd = memfd(kBytes, true);
  EXPECT_EQ(sharedFileProblem(fd, kBytes), "");
  EXPECT_EQ(sharedFileProblem(fd, kBytes - 4), "");
  ::close(fd);
}

TEST(SharedFile, AnUnsealedFileIsRefused) {
  int fd = memfd(kBytes, false);
  EXPECT_NE(sharedFileProblem(fd, kBytes).find("F_SEAL_SHRINK"), std::string::npos);
  // Sealing other things than shrinking is not enough.
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_GROW), 0);
  EXPECT_NE(sharedFileProblem(fd, kBytes), "");
  ::close(fd);
}

TEST(SharedFile, ASealedFileSmallerThanTheMappingIsRefused) {
  int fd = memfd(kBytes, true);
  EXPECT_NE(sharedFileProblem(fd, kBytes + 1).find("fewer than"), std::string::npos);
  ::close(fd);
}

TEST(SharedFile, AFileThatTakesNoSealsIsRefused) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_NE(sharedFileProblem(fds[0], 4), "");
  int unsealable = ::memfd_create("tally-test", MFD_CLOEXEC);  // without MFD_ALLOW_SEALING
  ASSERT_EQ(::ftruncate(unsealable, kBytes), 0);
  EXPECT_NE(sharedFileProblem(unsealable, kBytes), "");
  ::close(fds[0]);
  ::close(fds[1]);
  ::close(unsealable);
}

TEST(HostMappingTable, MapRefusesAnUnsealedFileBeforeMappingIt) {
  HostMappingTable table(0, "tenant 1 (test)");
  int fd = memfd(kBytes, false);
  uint64_t deviceAddress = 1;
  // No GPU is given: the refusal comes before the driver (or mmap) is reached.
  EXPECT_EQ(table.map(fd, 0x7f0000000000, kBytes, nullptr, deviceAddress), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(table.count(), 0u);
  ::close(fd);
}

TEST(HostMappingTable, PastMaxHostMappingsOutOfMemory) {
  HostMappingTable table(1, "tenant 1 (test)");
  std::vector<char> local(64);
  table.add(0x1000, HostMapping{local.data(), local.size(), 0});
  EXPECT_EQ(table.admit(0x1000), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(table.admit(0x2000), CUDA_ERROR_OUT_OF_MEMORY);
  int fd = memfd(kBytes, true);
  uint64_t deviceAddress = 0;
  EXPECT_EQ(table.map(fd, 0x2000, kBytes, nullptr, deviceAddress), CUDA_ERROR_OUT_OF_MEMORY);
  ::close(fd);
}

TEST(HostMappingTable, LookupsStayInsideOneMapping) {
  HostMappingTable table(0, "tenant 1 (test)");
  std::vector<uint32_t> words(16);
  char* local = reinterpret_cast<char*>(words.data());
  table.add(0x1000, HostMapping{local, 64, 0xd000});
  EXPECT_EQ(table.hostAddress(0x1000, 64), local);
  EXPECT_EQ(table.hostAddress(0x1010, 8), local + 16);
  EXPECT_EQ(table.hostAddress(0x1010, 49), nullptr);  // past its end
  EXPECT_EQ(table.hostAddress(0xfff, 1), nullptr);
  EXPECT_EQ(table.hostAddress(0x1041, 0), nullptr);
  auto word = table.sharedWord(0x1008);
  ASSERT_TRUE(word.has_value());
  EXPECT_EQ(word->local, &words[2]);
  EXPECT_EQ(word->device, 0xd008u);
  EXPECT_FALSE(table.sharedWord(0x1002).has_value());  // misaligned
  EXPECT_FALSE(table.sharedWord(0x103e).has_value());  // straddles the end
  EXPECT_FALSE(table.sharedWord(0x1040).has_value());
  EXPECT_EQ(table.deviceAddress(0x1000, 64), 0xd000u);
  EXPECT_EQ(table.deviceAddress(0x1038, 8), 0xd038u);
  EXPECT_EQ(table.deviceAddress(0x1038, 9), 0u);  // past its end
  EXPECT_EQ(table.deviceAddress(0xff8, 8), 0u);
}

TEST(HostMappingTable, AWordWithoutADeviceAddressIsNoSharedWord) {
  HostMappingTable table(0, "tenant 1 (test)");
  std::vector<uint32_t> words(4);
  table.add(0x1000, HostMapping{words.data(), 16, 0});
  EXPECT_NE(table.hostAddress(0x1000, 4), nullptr);
  EXPECT_FALSE(table.sharedWord(0x1000).has_value());
  EXPECT_EQ(table.deviceAddress(0x1000, 4), 0u);
}

TEST(HostMappingTable, AMappingWithAHeldWordStaysMapped) {
  HostMappingTable table(0, "tenant 1 (test)");
  void* held = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* free = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(held, MAP_FAILED);
  ASSERT_NE(free, MAP_FAILED);
  table.add(0x10000, HostMapping{held, 4096, 0xd000});
  table.add(0x20000, HostMapping{free, 4096, 0xe000});
  table.holdWord(static_cast<uint32_t*>(held) + 100);
  EXPECT_EQ(table.unmap(0x10000), CUDA_ERROR_INVALID_VALUE);  // a stream may still wait on it
  EXPECT_EQ(table.unmap(0x20000), CUDA_SUCCESS);
  EXPECT_EQ(table.unmap(0x20000), CUDA_ERROR_INVALID_VALUE);  // gone
  EXPECT_EQ(table.count(), 1u);
  ::munmap(held, 4096);
}

}  // namespace
}  // namespace tally::server::session
