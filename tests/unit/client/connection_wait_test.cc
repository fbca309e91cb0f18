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

// A cudaMalloc round trip: the fake answers every one with a new address (nullopt: no reply,
// or another call's).
std::optional<uint64_t> allocateOn(Connection& connection) {
  capnp::MallocMessageBuilder message;
  uint64_t id = connection.nextCallId();
  auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
  call.setId(id);
  call.initMemAlloc().setSize(64);
  ReplyMessage reply;
  if (connection.roundTrip(id, message, reply) != CUDA_SUCCESS || reply.reply().getId() != id) return std::nullopt;
  return reply.reply().getValue();
}

class ConnectionWait : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    auto endpoint = address::parseEndpoint(server_.endpoint(), error);
    ASSERT_TRUE(endpoint) << error;
    connection_ = Connection::open(*endpoint, "wait-test", wire::PriorityClass::BEST_EFFORT, error);
    ASSERT_TRUE(connection_) << error;
  }

  std::optional<uint64_t> allocate() { return allocateOn(*connection_); }

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

// A call that names a completion word returns once the word holds its id, before its reply
// (tallyd stores the word first); the late reply is dropped, and the next call gets its own.
TEST(ConnectionWord, ACallEndsOnItsWordBeforeItsReply) {
  using namespace std::chrono_literals;
  testing::FakeTallyd server;
  server.offerSharedHostMemory(true);
  server.delayRepliesAfterWords(400ms);
  std::string error;
  auto endpoint = address::parseEndpoint(server.endpoint(), error);
  ASSERT_TRUE(endpoint) << error;
  auto connection = Connection::open(*endpoint, "word-test", wire::PriorityClass::BEST_EFFORT, error);
  ASSERT_TRUE(connection) << error;

  FreeSlots::Lease slot = connection->takeCompletionSlot();
  ASSERT_TRUE(slot) << "no completion word: the connection does not use shared rings";
  capnp::MallocMessageBuilder message;
  uint64_t id = connection->nextCallId();
  auto call = message.initRoot<wire::ClientMessage>().initCalls(1)[0];
  call.setId(id);
  call.initStreamSynchronize().setStream(1);
  call.setCompletionSlot(slot.index() + 1);
  ReplyMessage reply;
  auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(connection->roundTrip(id, message, reply, {}, -1, &connection->completionWord(slot)), CUDA_SUCCESS);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 300ms);
  EXPECT_EQ(reply.reply().getStatus(), CUDA_SUCCESS);
  EXPECT_EQ(reply.reply().getDeferredStatus(), CUDA_SUCCESS);
  EXPECT_EQ(connection->wordCompletions(), 1u);

  std::optional<uint64_t> next = allocateOn(*connection);  // its own reply, not the late one
  ASSERT_TRUE(next);
  EXPECT_NE(*next, 0u);
  EXPECT_EQ(connection->wordCompletions(), 1u);
}

// Completion words are few: every one can be taken, none twice, and one given back is taken again.
TEST(ConnectionWord, CompletionSlotsAreTakenOnceAndGivenBack) {
  FreeSlots slots(frame::SharedRings::kCompletionSlots);
  std::vector<FreeSlots::Lease> taken;
  std::vector<bool> seen(frame::SharedRings::kCompletionSlots, false);
  for (unsigned i = 0; i < frame::SharedRings::kCompletionSlots; ++i) {
    taken.push_back(slots.take());
    ASSERT_TRUE(taken.back());
    ASSERT_LT(taken.back().index(), frame::SharedRings::kCompletionSlots);
    EXPECT_FALSE(seen[taken.back().index()]) << "slot " << taken.back().index() << " taken twice";
    seen[taken.back().index()] = true;
  }
  EXPECT_FALSE(slots.take());
  unsigned released = taken.back().index();
  taken.pop_back();
  FreeSlots::Lease again = slots.take();
  ASSERT_TRUE(again);
  EXPECT_EQ(again.index(), released);
}

}  // namespace
}  // namespace tally::client
