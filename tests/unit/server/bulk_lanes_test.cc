// Bulk lanes on tallyd's side (server/session/bulk_lanes.h): who may join a tenant's lanes, and
// what a lane may send: bytes only into the range the tenant's session asks for, each byte once,
// never for a copy that is over. Lanes are socketpairs here; the test writes the client's frames.
#include "server/session/bulk_lanes.h"

#include "common/frame/frame.h"
#include "schema/envelope.capnp.h"
#include "server/session/outbox.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <thread>

namespace tally::server::session {
namespace {

using namespace std::chrono_literals;

std::span<const uint8_t> keyOf(const BulkLanes& lanes) { return {lanes.key().data(), lanes.key().size()}; }

std::vector<char> pattern(size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 131) ^ (i >> 7));
  return v;
}

// A joined lane: tallyd's end runs serve() on a thread; the test writes to clientFd.
struct TestLane {
  int clientFd = -1;
  std::thread server;
};

class BulkLanesTest : public ::testing::Test {
 public:
  void open(unsigned count, std::chrono::milliseconds wait = 5s) {
    lanes_ = std::make_shared<BulkLanes>(7, "t", count, false, "", wait);
    for (unsigned i = 0; i < count; ++i) {
      int fds[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
      auto outbox = std::make_shared<Outbox>(fds[0], nullptr);
      ASSERT_EQ(lanes_->join(i, keyOf(*lanes_), false, "", outbox, fds[0]), "");
      TestLane lane;
      lane.clientFd = fds[1];
      lane.server = std::thread([lanes = lanes_, i, fd = fds[0], outbox] {
        frame::StreamReader reader(fd);
        lanes->serve(i, reader, frame::FrameLimits{});
      });
      lanes_test_.push_back(std::move(lane));
    }
  }
  void TearDown() override {
    if (lanes_) lanes_->close();
    for (auto& lane : lanes_test_) {
      ::close(lane.clientFd);
      if (lane.server.joinable()) lane.server.join();
    }
  }
  // The client's LaneData frame: `size` bytes of `bytes` at `offset` of copy `token`.
  void send(unsigned lane, uint64_t token, uint64_t offset, const std::vector<char>& bytes, size_t from, size_t size) {
    capnp::MallocMessageBuilder message;
    auto data = message.initRoot<wire::ClientMessage>().initLaneData();
    data.setToken(token);
    data.setOffset(offset);
    auto words = capnp::messageToFlatArray(message);
    iovec bulk{const_cast<char*>(bytes.data() + from), size};
    ASSERT_TRUE(frame::writeFrame(lanes_test_[lane].clientFd, words, {&bulk, 1}).ok);
  }

  // The lanes failed, and their reason says `part`.
  void expectFailedWith(const std::string& part) {
    EXPECT_FALSE(lanes_->ready());
    EXPECT_NE(lanes_->failure().find(part), std::string::npos) << lanes_->failure();
  }

  std::shared_ptr<BulkLanes> lanes_;
  std::vector<TestLane> lanes_test_;
  const std::vector<char> bytes_ = pattern(1000);  // what the client sends
  std::vector<char> got_ = std::vector<char>(1000);  // where the session wants it
};

TEST(BulkLanesJoin, OnlyTheKeyTheIndexAndTheTransportOfTheTenantJoin) {
  auto lanes = std::make_shared<BulkLanes>(3, "t", 2, true, "CN=a");
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  auto outbox = std::make_shared<Outbox>(fds[0], nullptr);
  BulkLanes::Key wrong = lanes->key();
  wrong[31] ^= 1;
  EXPECT_EQ(lanes->join(0, {wrong.data(), wrong.size()}, true, "CN=a", outbox, fds[0]), "wrong lane key");
  EXPECT_EQ(lanes->join(0, keyOf(*lanes).first(16), true, "CN=a", outbox, fds[0]), "wrong lane key");
  EXPECT_NE(lanes->join(2, keyOf(*lanes), true, "CN=a", outbox, fds[0]), "");
  EXPECT_NE(lanes->join(0, keyOf(*lanes), false, "CN=a", outbox, fds[0]), "");  // plain TCP lane of a TLS tenant
  EXPECT_NE(lanes->join(0, keyOf(*lanes), true, "CN=b", outbox, fds[0]), "");   // another certificate
  EXPECT_FALSE(lanes->ready());
  EXPECT_EQ(lanes->join(0, keyOf(*lanes), true, "CN=a", outbox, fds[0]), "");
  EXPECT_NE(lanes->join(0, keyOf(*lanes), true, "CN=a", outbox, fds[0]), "");  // lane 0 twice
  EXPECT_FALSE(lanes->ready());
  EXPECT_EQ(lanes->join(1, keyOf(*lanes), true, "CN=a", outbox, fds[0]), "");
  EXPECT_TRUE(lanes->ready());
  lanes->close();
  EXPECT_FALSE(lanes->ready());
  EXPECT_NE(lanes->join(1, keyOf(*lanes), true, "CN=a", outbox, fds[0]), "");
  ::close(fds[1]);
}

TEST(BulkLanesJoin, KeysDifferBetweenTenants) {
  BulkLanes a(1, "a", 1, false, ""), b(2, "b", 1, false, "");
  EXPECT_NE(a.key(), b.key());
}

TEST_F(BulkLanesTest, ChunksOfSeveralLanesFillEachRangeTheSessionAsksFor) {
  open(3);
  const size_t total = 300'000;
  std::vector<char> bytes = pattern(total);
  // Round-robin chunks of 40,000 bytes, as the client deals them; the ranges (100,000 bytes)
  // do not line up with the chunks.
  std::thread client([&] {
    for (size_t c = 0, off = 0; off < total; ++c, off += 40'000) {
      send(c % 3, 9, off, bytes, off, std::min<size_t>(40'000, total - off));
    }
  });
  std::vector<char> got(total, 0);
  for (size_t off = 0; off < total; off += 100'000) {
    ASSERT_TRUE(lanes_->receive(9, total, off, got.data() + off, 100'000)) << lanes_->failure();
  }
  client.join();
  EXPECT_EQ(got, bytes);
  // The next copy, part of it dropped (a refused copy's bytes are read and thrown away).
  std::thread next([&] {
    send(0, 10, 0, bytes, 0, 1000);
    send(1, 10, 1000, bytes, 1000, 1000);
  });
  std::vector<char> second(1000, 0);
  ASSERT_TRUE(lanes_->receive(10, 2000, 0, nullptr, 1000));
  ASSERT_TRUE(lanes_->receive(10, 2000, 1000, second.data(), 1000));
  next.join();
  EXPECT_TRUE(std::equal(second.begin(), second.end(), bytes.begin() + 1000));
  EXPECT_TRUE(lanes_->ready());
}

// What a lane may not send: each case plays the client's frames and the session's asks, then the
// lanes must have failed for the reason named.
struct HostileLane {
  const char* name;
  unsigned lanes;
  std::function<void(BulkLanesTest&)> play;
  const char* reason;
};

class HostileLaneTest : public BulkLanesTest, public ::testing::WithParamInterface<HostileLane> {};

TEST_P(HostileLaneTest, FailsTheLanes) {
  open(GetParam().lanes);
  GetParam().play(*this);
  expectFailedWith(GetParam().reason);
}

INSTANTIATE_TEST_SUITE_P(
    BulkLanes, HostileLaneTest,
    ::testing::Values(
        HostileLane{"TheSameBytesTwice", 2,
                    [](BulkLanesTest& t) {
                      t.send(0, 4, 0, t.bytes_, 0, 600);
                      t.send(1, 4, 200, t.bytes_, 200, 400);  // overlaps the first chunk
                      EXPECT_FALSE(t.lanes_->receive(4, 1000, 0, t.got_.data(), 1000));
                    },
                    "twice"},
        HostileLane{"BytesOfACopyThatIsOver", 1,
                    [](BulkLanesTest& t) {
                      t.send(0, 8, 0, t.bytes_, 0, 100);
                      ASSERT_TRUE(t.lanes_->receive(8, 100, 0, t.got_.data(), 100));
                      t.send(0, 7, 0, t.bytes_, 0, 100);  // an earlier copy's token: stale or forged
                      std::this_thread::sleep_for(100ms);
                      EXPECT_FALSE(t.lanes_->receive(9, 100, 0, t.got_.data(), 100));
                    },
                    "taken already"},
        HostileLane{"BytesPastTheEndOfTheCopy", 1,
                    [](BulkLanesTest& t) {
                      t.send(0, 3, 50, t.bytes_, 0, 200);  // the copy has 100 bytes
                      EXPECT_FALSE(t.lanes_->receive(3, 100, 0, t.got_.data(), 100));
                    },
                    "which has 100"},
        HostileLane{"ARangeThatSkipsBytes", 1,
                    [](BulkLanesTest& t) {
                      t.send(0, 5, 0, t.bytes_, 0, 50);
                      ASSERT_TRUE(t.lanes_->receive(5, 100, 0, t.got_.data(), 50));
                      // Bytes 50..60 were never asked for: the session's ranges must follow each other.
                      EXPECT_FALSE(t.lanes_->receive(5, 100, 60, t.got_.data(), 40));
                    },
                    "asked for after"}),
    [](const ::testing::TestParamInfo<HostileLane>& info) { return std::string(info.param.name); });

TEST_F(BulkLanesTest, ASessionWaitingForBytesThatNeverComeGivesUp) {
  open(2, 200ms);
  std::vector<char> got(100);
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(lanes_->receive(1, 100, 0, got.data(), 100));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  expectFailedWith("waited 200 ms");
}

TEST_F(BulkLanesTest, ALaneClosedMidCopyEndsTheWait) {
  open(2);
  std::vector<char> bytes = pattern(1000);
  send(0, 2, 0, bytes, 0, 500);
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    ::shutdown(lanes_test_[1].clientFd, SHUT_RDWR);
  });
  std::vector<char> got(1000);
  EXPECT_FALSE(lanes_->receive(2, 1000, 0, got.data(), 1000));
  closer.join();
  expectFailedWith("lane 1 closed");
}

TEST_F(BulkLanesTest, DeviceToHostBytesAreDealtAcrossTheLanes) {
  open(2);
  std::vector<char> bytes = pattern(1u << 20);
  auto keep = std::make_shared<std::vector<char>>(bytes);
  ASSERT_TRUE(lanes_->send(11, 4096, keep->data(), keep->size(), keep));
  std::vector<char> got(bytes.size(), 0);
  size_t received = 0;
  for (auto& lane : lanes_test_) {  // each lane carries a whole number of HostData frames
    frame::StreamReader reader(lane.clientFd);
    frame::IncomingFrame frame;
    ASSERT_TRUE(frame.readMessage(reader, frame::FrameLimits{}).ok);
    auto data = frame.message().getRoot<wire::ServerMessage>().getHostData();
    EXPECT_EQ(data.getToken(), 11u);
    ASSERT_GE(data.getOffset(), 4096u);
    ASSERT_LE(data.getOffset() - 4096 + frame.bulkBytes(), got.size());
    ASSERT_TRUE(reader.read(got.data() + (data.getOffset() - 4096), frame.bulkBytes()).ok);
    received += frame.bulkBytes();
  }
  EXPECT_EQ(received, bytes.size());
  EXPECT_EQ(got, bytes);
}

}  // namespace
}  // namespace tally::server::session
