// The connection survives faults in the application's buffers: a send whose bulk bytes cannot
// be read, or a device-to-host reply whose destination cannot be written, fails that call with
// CUDA_ERROR_INVALID_VALUE and leaves the connection up (before: "Bad address", connection lost,
// every later call cudaErrorDevicesUnavailable). Each test runs over the socket and over the
// shared rings (common/frame/shared_ring.h), which copy the bulk with host_memory::copyIn.
#include "client/transport/connection.h"
#include "fake_tallyd.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace tally::client {
namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

class ConnectionFault : public ::testing::TestWithParam<bool> {
 protected:
  bool rings() const { return GetParam(); }
  void SetUp() override {
    server_.offerSharedHostMemory(rings());  // as tallyd over a Unix socket: it takes the rings
    std::string error;
    auto endpoint = address::parseEndpoint(server_.endpoint(), error);
    ASSERT_TRUE(endpoint) << error;
    connection_ = Connection::open(*endpoint, "fault-test", wire::PriorityClass::BEST_EFFORT, error);
    ASSERT_TRUE(connection_) << error;
  }

  // A round trip of a memcpy call; `bulk` is its host-to-device payload.
  CUresult copyCall(wire::CopyKind kind, size_t bytes, uint64_t token, std::span<const iovec> bulk = {}) {
    capnp::MallocMessageBuilder message;
    uint64_t id = connection_->nextCallId();
    auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
    call.setId(id);
    auto m = call.initMemcpy();
    m.setKind(kind);
    m.setWidth(bytes);
    m.setHeight(1);
    m.setToken(token);
    ReplyMessage reply;
    return connection_->roundTrip(id, message, reply, bulk);
  }

  CUresult healthyCall() {
    char bytes[16] = {};
    iovec bulk{bytes, sizeof(bytes)};
    return copyCall(wire::CopyKind::HOST_TO_DEVICE, sizeof(bytes), 0, std::span<const iovec>(&bulk, 1));
  }

  testing::FakeTallyd server_;
  std::unique_ptr<Connection> connection_;
};

TEST_P(ConnectionFault, BulkFaultingAtOnceFailsTheCallNotTheConnection) {
  auto* region = static_cast<char*>(::mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ::mprotect(region + kPage, kPage, PROT_NONE);
  iovec bulk[2] = {{region + kPage - 4, 4}, {region + kPage, 4096}};
  EXPECT_EQ(copyCall(wire::CopyKind::HOST_TO_DEVICE, 4100, 0, bulk), CUDA_ERROR_INVALID_VALUE);
  EXPECT_FALSE(connection_->broken());
  EXPECT_EQ(healthyCall(), CUDA_SUCCESS);
  EXPECT_EQ(server_.usesSharedRings(), rings());
  if (rings()) {
    EXPECT_EQ(server_.calls(), 2u);  // the header went into the ring first: the frame came, padded
    EXPECT_GE(server_.zeroBulkFrames(), 1u);
  } else {
    EXPECT_EQ(server_.calls(), 1u);  // the faulted call never left: the kernel sent none of it
  }
  ::munmap(region, 2 * kPage);
}

TEST_P(ConnectionFault, BulkFaultingMidFrameIsPaddedAndTheStreamStaysFramed) {
  // Large enough that the kernel sends part of the frame before it reaches the bad page.
  const size_t readable = 4u << 20;
  auto* region = static_cast<char*>(::mmap(nullptr, readable + kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ::mprotect(region + readable, kPage, PROT_NONE);
  iovec bulk{region, readable + kPage};
  EXPECT_EQ(copyCall(wire::CopyKind::HOST_TO_DEVICE, readable + kPage, 0, std::span<const iovec>(&bulk, 1)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_FALSE(connection_->broken());
  EXPECT_EQ(healthyCall(), CUDA_SUCCESS);  // tallyd still parses the stream and answers
  EXPECT_EQ(server_.calls(), 2u);          // the faulted frame arrived whole ...
  EXPECT_GE(server_.zeroBulkFrames(), 1u);  // ... its missing bytes as zeros
  ::munmap(region, readable + kPage);
}

TEST_P(ConnectionFault, UnwritableDestinationFailsTheCopyNotTheConnection) {
  auto* readOnly = static_cast<char*>(::mmap(nullptr, kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  uint64_t token = connection_->expectHostData(readOnly, 64);
  EXPECT_EQ(copyCall(wire::CopyKind::DEVICE_TO_HOST, 64, token), CUDA_SUCCESS);
  EXPECT_FALSE(connection_->forgetHostData(token));  // its bytes could not be written
  EXPECT_FALSE(connection_->broken());

  char landing[64] = {};
  token = connection_->expectHostData(landing, sizeof(landing));
  EXPECT_EQ(copyCall(wire::CopyKind::DEVICE_TO_HOST, sizeof(landing), token), CUDA_SUCCESS);
  EXPECT_TRUE(connection_->forgetHostData(token));
  EXPECT_EQ(static_cast<unsigned char>(landing[63]), 0xAB);
  ::munmap(readOnly, kPage);
}

INSTANTIATE_TEST_SUITE_P(SocketAndRings, ConnectionFault, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Rings" : "Socket"; });

}  // namespace
}  // namespace tally::client
