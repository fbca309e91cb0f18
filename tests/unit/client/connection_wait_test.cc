// Waiting for replies (Connection::pollForReply): a thread waiting for its reply reads the socket
// itself and routes every frame it finds, so under concurrency each thread must still get exactly
// its own reply — whether it or another thread (or the receiver thread, once waits block) read it.
#include "client/transport/connection.h"
#include "fake_tallyd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace tally::client {
namespace {

class ConnectionWait : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    auto endpoint = address::parseEndpoint(server_.endpoint(), error);
    ASSERT_TRUE(endpoint) << error;
    connection_ = Connection::open(*endpoint, "wait-test", wire::PriorityClass::BEST_EFFORT, error);
    ASSERT_TRUE(connection_) << error;
  }

  // A cudaMalloc round trip: the fake answers every one with a new address.
  std::optional<uint64_t> allocate() {
    capnp::MallocMessageBuilder message;
    uint64_t id = connection_->nextCallId();
    auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
    call.setId(id);
    call.initMemAlloc().setSize(64);
    ReplyMessage reply;
    if (connection_->roundTrip(id, message, reply) != CUDA_SUCCESS || reply.reply().getId() != id) return std::nullopt;
    return reply.reply().getValue();
  }

  // `threads` threads with `calls` round trips each; every answer must be distinct.
  void roundTripsFromThreads(int threads, int calls) {
    std::vector<std::vector<uint64_t>> answers(threads);
    std::atomic<int> failures{0};
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < calls; ++i) {
          if (auto value = allocate()) answers[t].push_back(*value);
          else failures.fetch_add(1);
        }
      });
    }
    for (std::thread& w : workers) w.join();
    EXPECT_EQ(failures.load(), 0);
    std::vector<uint64_t> all;
    for (const auto& a : answers) all.insert(all.end(), a.begin(), a.end());
    ASSERT_EQ(all.size(), static_cast<size_t>(threads * calls));
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a reply reached two callers";
  }

  testing::FakeTallyd server_;
  std::unique_ptr<Connection> connection_;
};

TEST_F(ConnectionWait, ConcurrentCallersEachGetTheirOwnReply) { roundTripsFromThreads(8, 200); }

TEST_F(ConnectionWait, BlockingWaitsAreAnsweredByTheReceiverThread) {
  connection_->setBlockingWaits(true);  // cudaDeviceScheduleBlockingSync: a 20 µs poll, then sleep
  roundTripsFromThreads(4, 100);
  EXPECT_FALSE(connection_->broken());
}

}  // namespace
}  // namespace tally::client
