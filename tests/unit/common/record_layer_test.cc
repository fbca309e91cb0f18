// sendSealed (common/frame/record_layer): what it hands the record layer and what reaches the
// socket, with a layer that frames plaintext in length-prefixed "records" (no cryptography).
#include "common/frame/record_layer.h"

#include "common/frame/socket_io.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace tally::frame {
namespace {

// Each seal() becomes one record: a 4-byte length, then the plaintext.
class LengthPrefixedRecords final : public RecordLayer {
 public:
  bool seal(const void* plain, size_t size, std::vector<char>& wire, std::string&) override {
    ++seals;
    auto length = static_cast<uint32_t>(size);
    wire.insert(wire.end(), reinterpret_cast<char*>(&length), reinterpret_cast<char*>(&length) + 4);
    wire.insert(wire.end(), static_cast<const char*>(plain), static_cast<const char*>(plain) + size);
    return true;
  }
  bool absorb(const void* wire, size_t size, std::string&) override {
    in_.insert(in_.end(), static_cast<const char*>(wire), static_cast<const char*>(wire) + size);
    return true;
  }
  ssize_t open(void* plain, size_t size, std::string&) override {
    if (in_.size() < 4) return 0;
    uint32_t length;
    std::memcpy(&length, in_.data(), 4);
    if (in_.size() < 4 + length || size < length) return 0;
    std::memcpy(plain, in_.data() + 4, length);
    in_.erase(in_.begin(), in_.begin() + 4 + length);
    return length;
  }
  bool peerClosed() const override { return false; }
  bool hasPlaintext() const override { return in_.size() >= 4; }
  int seals = 0;

 private:
  std::vector<char> in_;
};

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

bool failingCopy(void*, const void*, size_t) { return false; }

TEST(RecordLayer, SmallFrameIsOneRecordAndReadsBackWhole) {
  SocketPair pair;
  LengthPrefixedRecords sender, receiver;
  std::string head = "header", message = "message words", bulk = "bulk";
  std::vector<iovec> parts{{head.data(), head.size()}, {message.data(), message.size()}, {bulk.data(), bulk.size()}};
  int error = -1;
  EXPECT_EQ(sendSealed(pair.fds[0], sender, parts, error), head.size() + message.size() + bulk.size());
  EXPECT_EQ(error, 0);
  EXPECT_EQ(sender.seals, 1) << "a small frame's parts share one record";
  StreamReader reader(pair.fds[1]);
  reader.useRecords(&receiver);
  std::string got(head.size() + message.size() + bulk.size(), '\0');
  ASSERT_TRUE(reader.read(got.data(), got.size()).ok);
  EXPECT_EQ(got, head + message + bulk);
}

TEST(RecordLayer, LargeBulkIsSealedInChunksAndArrivesInOrder) {
  SocketPair pair;
  LengthPrefixedRecords sender, receiver;
  std::vector<char> bulk(3u << 20);
  std::iota(bulk.begin(), bulk.end(), 0);
  iovec part{bulk.data(), bulk.size()};
  std::vector<char> got(bulk.size());
  StreamReader reader(pair.fds[1]);
  reader.useRecords(&receiver);
  IoStatus status;
  std::thread read([&] { status = reader.read(got.data(), got.size()); });
  int error = -1;
  EXPECT_EQ(sendSealed(pair.fds[0], sender, std::span<const iovec>(&part, 1), error), bulk.size());
  read.join();
  EXPECT_EQ(error, 0);
  EXPECT_GT(sender.seals, 1);
  ASSERT_TRUE(status.ok) << status.error;
  EXPECT_TRUE(got == bulk);
}

// The application's bytes fail to copy: ours before them still go out, and the caller learns EFAULT.
TEST(RecordLayer, UnreadableForeignPartStopsWithEfaultAfterSendingWhatCameBefore) {
  SocketPair pair;
  LengthPrefixedRecords sender, receiver;
  std::string head = "head";
  char foreign[16] = {};
  std::vector<iovec> parts{{head.data(), head.size()}, {foreign, sizeof(foreign)}};
  int error = 0;
  EXPECT_EQ(sendSealed(pair.fds[0], sender, parts, error, 1, failingCopy), head.size());
  EXPECT_EQ(error, EFAULT);
  StreamReader reader(pair.fds[1]);
  reader.useRecords(&receiver);
  std::string got(head.size(), '\0');
  ASSERT_TRUE(reader.read(got.data(), got.size()).ok);
  EXPECT_EQ(got, head);
}

}  // namespace
}  // namespace tally::frame
