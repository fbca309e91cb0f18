// Framing: headers are validated before anything is allocated, frames survive a real socket
// with bulk bytes and descriptors, and bad input is refused with a reason.
#include "common/frame/socket_io.h"
#include "schema/envelope.capnp.h"

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

namespace tally::frame {
namespace {

struct SocketPair {
  int a = -1, b = -1;
  SocketPair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    a = fds[0];
    b = fds[1];
  }
  ~SocketPair() {
    ::close(a);
    ::close(b);
  }
};

TEST(FrameHeader, AcceptsWellFormedAndRefusesEachViolation) {
  FrameLimits limits;
  EXPECT_EQ(checkHeader(makeHeader(64, 10), limits), "");
  EXPECT_NE(checkHeader(FrameHeader{0x12345678, 64, 0}, limits).find("magic"), std::string::npos);
  EXPECT_NE(checkHeader(makeHeader(0, 0), limits), "");
  EXPECT_NE(checkHeader(makeHeader(63, 0), limits).find("multiple of 8"), std::string::npos);
  EXPECT_NE(checkHeader(makeHeader(limits.maxMessageBytes + 8, 0), limits).find("exceeds"), std::string::npos);
  EXPECT_NE(checkHeader(makeHeader(64, limits.maxBulkBytes + 1), limits).find("bulk"), std::string::npos);
}

TEST(Frame, RoundTripsMessageAndBulkOverASocket) {
  SocketPair pair;
  capnp::MallocMessageBuilder message;
  auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
  call.setId(42);
  auto copy = call.initMemcpy();
  copy.setDst(0xdead0000);
  copy.setWidth(3000);
  std::string bulk(3000, 'x');
  for (size_t i = 0; i < bulk.size(); ++i) bulk[i] = static_cast<char>(i * 7);
  iovec part{bulk.data(), bulk.size()};
  auto words = capnp::messageToFlatArray(message);
  std::thread writer([&] { EXPECT_TRUE(writeFrame(pair.a, words, std::span<const iovec>(&part, 1)).ok); });

  StreamReader reader(pair.b);
  IncomingFrame frame;
  ASSERT_TRUE(frame.readMessage(reader, FrameLimits{}).ok);
  auto got = frame.message().getRoot<wire::ClientMessage>().getCalls()[0];
  EXPECT_EQ(got.getId(), 42u);
  EXPECT_EQ(got.getMemcpy().getDst(), 0xdead0000u);
  ASSERT_EQ(frame.bulkBytes(), bulk.size());
  std::string received(bulk.size(), '\0');
  ASSERT_TRUE(reader.read(received.data(), received.size()).ok);
  EXPECT_EQ(received, bulk);
  writer.join();
}

TEST(Frame, PassesADescriptorAlongsideAFrame) {
  SocketPair pair;
  int memfd = ::memfd_create("frame-test", 0);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(::write(memfd, "tally", 5), 5);
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::ClientMessage>().initCalls(1)[0].initHostRegister().setSize(4096);
  auto words = capnp::messageToFlatArray(message);
  ASSERT_TRUE(writeFrame(pair.a, words, {}, memfd).ok);
  ::close(memfd);

  StreamReader reader(pair.b);
  IncomingFrame frame;
  ASSERT_TRUE(frame.readMessage(reader, FrameLimits{}).ok);
  int received = reader.takeFd();
  ASSERT_GE(received, 0);
  char text[6] = {};
  EXPECT_EQ(::pread(received, text, 5, 0), 5);
  EXPECT_STREQ(text, "tally");
  EXPECT_EQ(reader.takeFd(), -1);
  ::close(received);
}

TEST(Frame, RefusesGarbageAndTruncation) {
  {
    SocketPair pair;
    const char garbage[] = "GET / HTTP/1.1\r\n\r\n";
    ASSERT_EQ(::write(pair.a, garbage, sizeof(garbage)), static_cast<ssize_t>(sizeof(garbage)));
    StreamReader reader(pair.b);
    IncomingFrame frame;
    IoStatus status = frame.readMessage(reader, FrameLimits{});
    EXPECT_FALSE(status.ok);
    EXPECT_NE(status.error.find("magic"), std::string::npos);
  }
  {
    SocketPair pair;
    FrameHeader header = makeHeader(64, 0);
    ASSERT_EQ(::write(pair.a, &header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
    ASSERT_EQ(::write(pair.a, "short", 5), 5);
    ::shutdown(pair.a, SHUT_WR);
    StreamReader reader(pair.b);
    IncomingFrame frame;
    IoStatus status = frame.readMessage(reader, FrameLimits{});
    EXPECT_FALSE(status.ok);
    EXPECT_FALSE(status.closed);
    EXPECT_NE(status.error.find("mid-frame"), std::string::npos);
  }
}

TEST(Frame, RefusesAMessageWhosePointersLeaveTheFrame) {
  SocketPair pair;
  // A struct pointer claiming a huge data section: in bounds of the header, not of the data.
  uint64_t words[3] = {0, 0, 0};
  uint32_t segmentTable[2] = {0, 2};  // one segment of 2 words
  std::memcpy(&words[0], segmentTable, 8);
  words[1] = (uint64_t{0xffff} << 32) | 0;  // struct pointer, offset 0, data 0xffff words
  FrameHeader header = makeHeader(16, 0);
  ASSERT_EQ(::write(pair.a, &header, sizeof(header)), static_cast<ssize_t>(sizeof(header)));
  ASSERT_EQ(::write(pair.a, words, 16), 16);
  StreamReader reader(pair.b);
  IncomingFrame frame;
  IoStatus status = frame.readMessage(reader, FrameLimits{});
  if (status.ok) {
    EXPECT_THROW(frame.message().getRoot<wire::ClientMessage>().getCalls(), kj::Exception);
  } else {
    EXPECT_FALSE(status.error.empty());
  }
}

size_t openDescriptorCount() {
  size_t count = 0;
  for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

// One frame of a peer that passes a memfd with every call and never lets them be taken.
void sendFrameWithDescriptor(int socket) {
  int memfd = ::memfd_create("frame-test-flood", 0);
  ASSERT_GE(memfd, 0);
  capnp::MallocMessageBuilder message;
  message.initRoot<wire::ClientMessage>().initCalls(1)[0].initHostRegister().setSize(4096);
  ASSERT_TRUE(writeFrame(socket, capnp::messageToFlatArray(message), {}, memfd).ok);
  ::close(memfd);
}

TEST(Frame, DescriptorsBeyondThePendingCapAreClosedAndDropThePeer) {
  size_t before = openDescriptorCount();
  {
    SocketPair pair;
    const size_t sent = StreamReader::kMaxPendingFds + 1;
    for (size_t i = 0; i < sent; ++i) sendFrameWithDescriptor(pair.a);
    StreamReader reader(pair.b);
    IncomingFrame frame;
    IoStatus status;
    size_t framesRead = 0;
    while (framesRead < sent && (status = frame.readMessage(reader, FrameLimits{})).ok) ++framesRead;
    EXPECT_FALSE(status.ok) << "all " << sent << " descriptors were queued";
    EXPECT_NE(status.error.find("descriptor"), std::string::npos) << status.error;
    EXPECT_LT(framesRead, sent);
    // What was queued is still there to take, exactly the cap and no more.
    size_t queued = 0;
    for (int fd; (fd = reader.takeFd()) >= 0; ++queued) ::close(fd);
    EXPECT_EQ(queued, StreamReader::kMaxPendingFds);
  }
  EXPECT_EQ(openDescriptorCount(), before) << "a descriptor over the cap was leaked";
}

TEST(Frame, DeadlineEndsAPeerThatTricklesItsFrame) {
  SocketPair pair;
  FrameHeader header = makeHeader(64, 0);
  std::atomic<bool> done{false};
  // One byte every 50 ms: each read sees progress, only a deadline over the whole frame ends it.
  std::thread trickle([&] {
    const char* bytes = reinterpret_cast<const char*>(&header);
    for (size_t i = 0; i < sizeof(header) + 64 && !done.load(); ++i) {
      char byte = i < sizeof(header) ? bytes[i] : 0;
      if (::write(pair.a, &byte, 1) != 1) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  StreamReader reader(pair.b);
  auto start = StreamReader::Clock::now();
  reader.setDeadline(start + std::chrono::milliseconds(300));
  IncomingFrame frame;
  IoStatus status = frame.readMessage(reader, FrameLimits{});
  auto took = StreamReader::Clock::now() - start;
  done.store(true);
  trickle.join();
  EXPECT_FALSE(status.ok);
  EXPECT_TRUE(status.timedOut) << status.error;
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  EXPECT_GE(took, std::chrono::milliseconds(290));
}

TEST(Frame, WithoutADeadlineASlowPeerIsWaitedFor) {
  SocketPair pair;
  StreamReader reader(pair.b);
  reader.setDeadline(StreamReader::Clock::now() + std::chrono::milliseconds(10));
  reader.setDeadline(std::nullopt);
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(::write(pair.a, "abcd", 4), 4);
  });
  char got[4];
  EXPECT_TRUE(reader.read(got, 4).ok);
  late.join();
}

}  // namespace
}  // namespace tally::frame
