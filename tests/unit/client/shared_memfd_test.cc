// Memory files shared with tallyd are sealed before they are sent: tallyd can rely on their
// size (a client that shrank one made tallyd take SIGBUS).
#include "client/runtime/shared_memfd.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tally::client {
namespace {

TEST(SharedMemfd, IsSealedAgainstShrinkingAndFurtherSeals) {
  std::string error;
  int fd = createSealedMemfd(1 << 20, error);
  ASSERT_GE(fd, 0) << error;
  int seals = ::fcntl(fd, F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);
  EXPECT_TRUE(seals & F_SEAL_SEAL);
  EXPECT_FALSE(seals & F_SEAL_WRITE);  // both sides write it

  EXPECT_EQ(::ftruncate(fd, 4096), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);  // nobody can change the seals now
  struct stat st{};
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);
  ::close(fd);
}

}  // namespace
}  // namespace tally::client
