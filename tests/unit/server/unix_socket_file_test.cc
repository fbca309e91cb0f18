// The Unix socket's file (finding 12): a directory others can change is refused, a stale path
// is removed only when it is a dead socket, and the file gets exactly unix_socket_mode whatever
// the umask, without following a symlink.
#include "server/transport/unix_socket_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace tally::server::transport {
namespace {

namespace fs = std::filesystem;

class SocketDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/tally-sockdir-test.XXXXXX";
    ASSERT_NE(::mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override {
    ::chmod(dir_.c_str(), 0700);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  std::string dir_;
};

mode_t modeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(SocketDirectory, WorldWritableWithoutStickyBitIsRefused) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  std::string why = checkSocketDirectory(dir_);
  EXPECT_NE(why.find("writable by every user"), std::string::npos) << why;
  std::string error;
  EXPECT_LT(bindUnixSocket(path("t.sock"), 0660, error), 0);
  EXPECT_NE(error.find(dir_), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(path("t.sock")));
}

TEST_F(SocketDirectory, StickyOrPrivateDirectoriesAreAccepted) {
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);  // like /tmp
  EXPECT_EQ(checkSocketDirectory(dir_), "");
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  EXPECT_EQ(checkSocketDirectory(dir_), "");
}

TEST_F(SocketDirectory, DirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the directory to another uid";
  ASSERT_EQ(::chown(dir_.c_str(), 12345, 12345), 0);
  std::string why = checkSocketDirectory(dir_);
  EXPECT_NE(why.find("owned by uid 12345"), std::string::npos) << why;
}

TEST_F(SocketDirectory, AStaleFileThatIsNoSocketIsKept) {
  std::ofstream(path("t.sock")) << "precious";
  std::string why = removeStaleSocket(path("t.sock"));
  EXPECT_NE(why.find("not a socket"), std::string::npos) << why;
  std::string text;
  std::ifstream(path("t.sock")) >> text;
  EXPECT_EQ(text, "precious");
}

TEST_F(SocketDirectory, ASymlinkAtTheSocketPathIsNeitherRemovedNorFollowed) {
  std::ofstream(path("victim")) << "x";
  ASSERT_EQ(::chmod(path("victim").c_str(), 0600), 0);
  fs::create_symlink(path("victim"), path("t.sock"));
  std::string error;
  EXPECT_LT(bindUnixSocket(path("t.sock"), 0666, error), 0);
  EXPECT_NE(error.find("not a socket"), std::string::npos) << error;
  EXPECT_TRUE(fs::is_symlink(path("t.sock")));
  EXPECT_EQ(modeOf(path("victim")), 0600u);
}

TEST_F(SocketDirectory, ADeadSocketIsReplacedALiveOneIsNot) {
  std::string error;
  int first = bindUnixSocket(path("t.sock"), 0600, error);
  ASSERT_GE(first, 0) << error;
  ASSERT_EQ(::listen(first, 4), 0);
  EXPECT_LT(bindUnixSocket(path("t.sock"), 0600, error), 0);  // another server listens there
  EXPECT_NE(error.find("in use"), std::string::npos) << error;
  ::close(first);  // its file stays behind, as after a crash
  int second = bindUnixSocket(path("t.sock"), 0600, error);
  EXPECT_GE(second, 0) << error;
  ::close(second);
}

TEST_F(SocketDirectory, TheSocketGetsExactlyItsModeWhateverTheUmask) {
  mode_t old = ::umask(077);
  std::string error;
  int fd = bindUnixSocket(path("t.sock"), 0660, error);
  ::umask(old);
  ASSERT_GE(fd, 0) << error;
  EXPECT_EQ(modeOf(path("t.sock")), 0660u);
  ::close(fd);
  removeSocketFile(path("t.sock"));
  EXPECT_FALSE(fs::exists(path("t.sock")));
}

TEST_F(SocketDirectory, ShutdownRemovesOnlyASocket) {
  std::ofstream(path("t.sock")) << "someone else's";
  removeSocketFile(path("t.sock"));
  EXPECT_TRUE(fs::exists(path("t.sock")));
}

TEST_F(SocketDirectory, AMissingDirectoryIsCreatedAndChecked) {
  std::string error;
  int fd = bindUnixSocket(path("sub/t.sock"), 0660, error);
  ASSERT_GE(fd, 0) << error;
  EXPECT_TRUE(fs::is_socket(path("sub/t.sock")));
  ::close(fd);
}

}  // namespace
}  // namespace tally::server::transport
