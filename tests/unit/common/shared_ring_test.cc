// The shared-memory rings beside a Unix socket: bytes arrive in order across wrap-arounds with
// both sides waiting on each other, end-of-stream and a vanished peer are noticed, descriptors
// still travel on the socket, and a file or positions a peer controls cannot make us touch
// memory outside the rings.
#include "common/frame/shared_ring.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace tally::frame {
namespace {

using namespace std::chrono_literals;

struct Pair {
  int client = -1, server = -1;
  std::unique_ptr<SharedRings> clientSide, serverSide;
  explicit Pair(size_t capacity = SharedRings::kMinCapacity) {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    client = fds[0];
    server = fds[1];
    std::string error;
    clientSide = SharedRings::create(capacity, client, error);
    EXPECT_NE(clientSide, nullptr) << error;
    serverSide = SharedRings::adopt(::dup(clientSide->fd()), capacity, server, error);
    EXPECT_NE(serverSide, nullptr) << error;
  }
  ~Pair() {
    clientSide.reset();
    serverSide.reset();
    ::close(client);
    ::close(server);
  }
};

std::vector<char> pattern(size_t size, unsigned seed) {
  std::vector<char> bytes(size);
  std::mt19937 random(seed);
  for (char& b : bytes) b = static_cast<char>(random());
  return bytes;
}

TEST(SharedRing, BytesArriveInOrderAcrossWrapsWhileBothSidesWait) {
  Pair p;
  const std::vector<char> sent = pattern(5u << 20, 1);  // 80 times the ring
  std::thread writer([&] {
    std::mt19937 random(2);
    for (size_t at = 0; at < sent.size();) {
      size_t chunk = std::min<size_t>(sent.size() - at, 1 + random() % 200'000);  // often larger than the ring
      iovec part{const_cast<char*>(sent.data() + at), chunk};
      int error = -1;
      ASSERT_EQ(p.clientSide->toServer().write(std::span<const iovec>(&part, 1), error), chunk);
      ASSERT_EQ(error, 0);
      at += chunk;
    }
  });
  std::vector<char> got(sent.size());
  std::mt19937 random(3);
  for (size_t at = 0; at < got.size();) {
    ByteRing& ring = p.serverSide->toServer();
    ASSERT_TRUE(ring.waitReadable(random() % 2 ? 0us : 50us, ByteRing::Clock::now() + 10s));
    at += ring.read(got.data() + at, std::min<size_t>(got.size() - at, 1 + random() % 100'000));
  }
  writer.join();
  EXPECT_EQ(got, sent);
  EXPECT_EQ(p.serverSide->toServer().readable(), 0u);
}

TEST(SharedRing, ClosedWriterIsEndOfStreamAfterTheRest) {
  Pair p;
  iovec part{const_cast<char*>("abc"), 3};
  int error = 0;
  p.serverSide->toClient().write(std::span<const iovec>(&part, 1), error);
  p.serverSide->toClient().close();
  ByteRing& reader = p.clientSide->toClient();
  ASSERT_TRUE(reader.waitReadable(0us));
  char got[8] = {};
  EXPECT_EQ(reader.read(got, sizeof(got)), 3u);
  EXPECT_STREQ(got, "abc");
  EXPECT_TRUE(reader.waitReadable(0us));  // returns at once: closed
  EXPECT_EQ(reader.read(got, sizeof(got)), 0u);
  EXPECT_TRUE(reader.closedByWriter());
}

TEST(SharedRing, AReaderNoticesAPeerThatIsGoneWithinASleepStep) {
  Pair p;
  std::thread peerDies([&] {
    std::this_thread::sleep_for(30ms);
    ::shutdown(p.client, SHUT_RDWR);  // the client process is gone: its socket closes
  });
  auto start = ByteRing::Clock::now();
  EXPECT_FALSE(p.serverSide->toServer().waitReadable(100us));
  EXPECT_EQ(errno, EPIPE);
  EXPECT_LT(ByteRing::Clock::now() - start, 30ms + 5 * ByteRing::kSleepStep);
  peerDies.join();
}

TEST(SharedRing, AWriterOfAFullRingGivesUpAtItsDeadline) {
  Pair p;
  std::vector<char> bytes(SharedRings::kMinCapacity + 1);
  iovec part{bytes.data(), bytes.size()};
  int error = 0;
  size_t n = p.serverSide->toClient().write(std::span<const iovec>(&part, 1), error, SIZE_MAX, nullptr,
                                            ByteRing::Clock::now() + 50ms);
  EXPECT_EQ(n, SharedRings::kMinCapacity);  // what fitted; nobody reads
  EXPECT_EQ(error, ETIMEDOUT);
}

TEST(SharedRing, AForeignPartThatCannotBeReadStopsTheWriteWithEfault) {
  Pair p;
  iovec parts[2] = {{const_cast<char*>("head"), 4}, {const_cast<char*>("bulk"), 4}};
  int error = 0;
  auto failingCopy = [](void*, const void*, size_t) { return false; };
  EXPECT_EQ(p.clientSide->toServer().write(parts, error, 1, failingCopy), 4u);
  EXPECT_EQ(error, EFAULT);
  EXPECT_EQ(p.serverSide->toServer().readable(), 4u);  // the head went out, the bulk did not
}

TEST(SharedRing, PositionsAPeerMadeUpAreNeverFollowedOutOfTheRing) {
  Pair p;
  // The client scribbles over the whole control page (it may: it owns the file too).
  void* page = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, p.clientSide->fd(), 0);
  ASSERT_NE(page, MAP_FAILED);
  std::memset(page, 0xa5, 4096);
  ByteRing& fromClient = p.serverSide->toServer();
  EXPECT_EQ(fromClient.readable(), 0u);  // a position from the future: nothing to read
  char sink[64];
  EXPECT_EQ(fromClient.read(sink, sizeof(sink)), 0u);
  iovec part{sink, sizeof(sink)};
  int error = 0;
  // Writing towards the client finds no room (its read position makes no sense) and gives up.
  EXPECT_EQ(p.serverSide->toClient().write(std::span<const iovec>(&part, 1), error, SIZE_MAX, nullptr,
                                           ByteRing::Clock::now() + 20ms),
            0u);
  EXPECT_NE(error, 0);
  ::munmap(page, 4096);
}

TEST(SharedRing, AdoptRefusesFilesThatAreNotAClientsRingFile) {
  std::string error;
  int plain = ::memfd_create("plain", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_EQ(::ftruncate(plain, static_cast<off_t>(SharedRings::fileBytes(SharedRings::kMinCapacity))), 0);
  EXPECT_EQ(SharedRings::adopt(::dup(plain), SharedRings::kMinCapacity, -1, error), nullptr);
  EXPECT_NE(error.find("sealed"), std::string::npos) << error;
  ASSERT_EQ(::fcntl(plain, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_EQ(SharedRings::adopt(::dup(plain), SharedRings::kMinCapacity, -1, error), nullptr);
  EXPECT_NE(error.find("does not start"), std::string::npos) << error;  // zeros, no magic
  EXPECT_EQ(SharedRings::adopt(::dup(plain), SharedRings::kMinCapacity * 2, -1, error), nullptr);
  EXPECT_NE(error.find("fewer than"), std::string::npos) << error;
  EXPECT_EQ(SharedRings::adopt(::dup(plain), SharedRings::kMinCapacity + 1, -1, error), nullptr);
  EXPECT_NE(error.find("out of range"), std::string::npos) << error;
  ::close(plain);
  EXPECT_EQ(SharedRings::create(3000, -1, error), nullptr);
}

TEST(SharedRing, FramesAndTheirDescriptorsArriveThroughAStreamReader) {
  Pair p;
  StreamReader reader(p.server);
  reader.useRing(&p.serverSide->toServer());
  Channel channel{p.client, &p.clientSide->toServer()};
  int passed = ::memfd_create("passed", MFD_CLOEXEC);
  ASSERT_GE(passed, 0);
  std::vector<char> bulk = pattern(300'000, 4);  // larger than the ring and the reader's buffer
  std::thread writer([&] {
    capnp::MallocMessageBuilder message;
    message.initRoot<wire::ClientMessage>().initHello().setTenantName("ring");
    auto words = capnp::messageToFlatArray(message);
    iovec part{bulk.data(), bulk.size()};
    EXPECT_TRUE(writeFrame(channel, words, std::span<const iovec>(&part, 1), passed).ok);
    EXPECT_TRUE(writeFrame(channel, words, {}).ok);
  });
  IncomingFrame frame;
  ASSERT_TRUE(frame.readMessage(reader, FrameLimits{}).ok);
  EXPECT_EQ(frame.message().getRoot<wire::ClientMessage>().getHello().getTenantName(), "ring");
  int got = reader.takeFd();
  EXPECT_GE(got, 0);
  std::vector<char> received(frame.bulkBytes());
  ASSERT_TRUE(reader.read(received.data(), received.size()).ok);
  EXPECT_EQ(received, bulk);
  ASSERT_TRUE(frame.readMessage(reader, FrameLimits{}).ok);
  EXPECT_EQ(frame.bulkBytes(), 0u);
  EXPECT_EQ(reader.takeFd(), -1);  // one descriptor was sent
  writer.join();
  if (got >= 0) ::close(got);
  ::close(passed);
}

// tallyd wakes a tenant's sleeping thread when it answers the client: the thread must then poll
// again for its spin time (the client's next call is near), not go straight back to sleep.
TEST(SharedRing, AWokenReaderPollsAgainBeforeItSleeps) {
  Pair p;
  ByteRing& ring = p.serverSide->toServer();
  std::atomic<bool> returned{false};
  std::thread reader([&] {
    EXPECT_TRUE(ring.waitReadable(300ms, ByteRing::Clock::now() + 10s));
    returned = true;
  });
  bool asleep = false;  // after its first 300 ms of polling
  for (auto until = ByteRing::Clock::now() + 5s; !asleep && ByteRing::Clock::now() < until;) {
    std::this_thread::sleep_for(1ms);
    asleep = ring.readerAsleep();
  }
  EXPECT_TRUE(asleep);
  // A wake-up can miss a reader between two sleep steps (it is awake then): try a few times.
  bool polling = false;
  for (int attempt = 0; attempt < 3 && !polling; ++attempt) {
    ring.wakeReader();
    std::this_thread::sleep_for(50ms);
    polling = !ring.readerAsleep();
  }
  EXPECT_TRUE(polling) << "the woken reader went back to sleep without polling";
  EXPECT_FALSE(returned.load());  // no bytes yet
  iovec part{const_cast<char*>("x"), 1};
  int error = 0;
  p.clientSide->toServer().write(std::span<const iovec>(&part, 1), error);
  reader.join();
  EXPECT_TRUE(returned.load());
}

}  // namespace
}  // namespace tally::frame
