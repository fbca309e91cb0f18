// HostCallbackWords against a simulated GPU: the test plays the stream, writing `reached` and
// waiting for `done` as cuStreamWriteValue32 / cuStreamWaitValue32 would.
#include "client/runtime/host_callback_words.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace tally::client {
namespace {

using namespace std::chrono_literals;

struct Region {
  std::vector<uint32_t> words;
  MapSharedRegion map() {
    return [this](size_t bytes, void*& local, uint64_t& server) {
      words.assign(bytes / sizeof(uint32_t), 0);
      local = words.data();
      server = 0x1000;  // "registered"
      return CUDA_SUCCESS;
    };
  }
};

uint32_t* word(uint64_t address) { return reinterpret_cast<uint32_t*>(address); }

bool waitFor(const std::function<bool()>& condition) {
  for (auto deadline = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < deadline;) {
    if (condition()) return true;
    std::this_thread::sleep_for(50us);
  }
  return false;
}

TEST(HostCallbackWords, RunsACallbackOnlyOnceTheStreamGetsThere) {
  Region region;
  std::atomic<int> runs{0}, ran{0};
  auto words = HostCallbackWords::open(region.map(), [&] { ++runs; });
  ASSERT_NE(words, nullptr);
  HostCallbackWords::Ticket t;
  ASSERT_TRUE(words->enqueue(7, [&] { ++ran; }, t));
  EXPECT_EQ(t.sequence, 1u);
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(ran.load(), 0) << "ran before the stream reached it";
  __atomic_store_n(word(t.reachedWord), t.sequence, __ATOMIC_RELEASE);  // the stream arrives
  ASSERT_TRUE(waitFor([&] { return __atomic_load_n(word(t.doneWord), __ATOMIC_ACQUIRE) == 1; }));
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(runs.load(), 1);
}

TEST(HostCallbackWords, KeepsStreamOrderAndStreamsApart) {
  Region region;
  auto words = HostCallbackWords::open(region.map(), [] {});
  ASSERT_NE(words, nullptr);
  std::mutex m;
  std::vector<int> order;
  HostCallbackWords::Ticket a1, a2, b1;
  ASSERT_TRUE(words->enqueue(1, [&] { std::lock_guard l(m); order.push_back(11); }, a1));
  ASSERT_TRUE(words->enqueue(1, [&] { std::lock_guard l(m); order.push_back(12); }, a2));
  ASSERT_TRUE(words->enqueue(2, [&] { std::lock_guard l(m); order.push_back(21); }, b1));
  EXPECT_EQ(a1.reachedWord, a2.reachedWord);  // one pair of words per stream
  EXPECT_NE(a1.reachedWord, b1.reachedWord);
  EXPECT_EQ(a2.sequence, 2u);
  // Stream 2 gets there first; stream 1 reaches its first callback only.
  __atomic_store_n(word(b1.reachedWord), 1u, __ATOMIC_RELEASE);
  __atomic_store_n(word(a1.reachedWord), 1u, __ATOMIC_RELEASE);
  ASSERT_TRUE(waitFor([&] { return __atomic_load_n(word(a1.doneWord), __ATOMIC_ACQUIRE) == 1; }));
  ASSERT_TRUE(waitFor([&] { return __atomic_load_n(word(b1.doneWord), __ATOMIC_ACQUIRE) == 1; }));
  {
    std::lock_guard l(m);
    EXPECT_EQ(order.size(), 2u) << "the second callback of stream 1 ran before the stream reached it";
  }
  __atomic_store_n(word(a2.reachedWord), 2u, __ATOMIC_RELEASE);
  ASSERT_TRUE(waitFor([&] { return __atomic_load_n(word(a2.doneWord), __ATOMIC_ACQUIRE) == 2; }));
  std::lock_guard l(m);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), 12);
}

TEST(HostCallbackWords, UnregisteredRegionMeansMessages) {
  std::vector<uint32_t> words(16384);
  auto map = [&](size_t, void*& local, uint64_t& server) {
    local = words.data();
    server = 0;  // tallyd could not register it: the GPU cannot see the words
    return CUDA_SUCCESS;
  };
  EXPECT_EQ(HostCallbackWords::open(map, [] {}), nullptr);
}

TEST(HostCallbackWords, CancelledCallbackGivesItsSequenceBack) {
  Region region;
  auto words = HostCallbackWords::open(region.map(), [] {});
  ASSERT_NE(words, nullptr);
  HostCallbackWords::Ticket t1, t2;
  ASSERT_TRUE(words->enqueue(3, [] {}, t1));
  words->cancelLast(3);  // its HostFunc call could not be sent
  ASSERT_TRUE(words->enqueue(3, [] {}, t2));
  EXPECT_EQ(t2.sequence, t1.sequence);
}

// A destroyed executable graph's host node gives its word pair back; the next key on those words
// continues their sequence (a stale `reached` from the old key never passes for the new one).
TEST(HostCallbackWords, AReleasedKeysWordsAreReusedWithFreshSequences) {
  Region region;
  auto words = HostCallbackWords::open(region.map(), [] {});
  ASSERT_NE(words, nullptr);
  HostCallbackWords::Ticket old;
  ASSERT_TRUE(words->enqueue(100, [] {}, old));
  __atomic_store_n(word(old.reachedWord), old.sequence, __ATOMIC_RELEASE);
  ASSERT_TRUE(waitFor([&] { return __atomic_load_n(word(old.doneWord), __ATOMIC_ACQUIRE) == old.sequence; }));
  words->release(100);
  std::atomic<int> ran{0};
  HostCallbackWords::Ticket reused;
  ASSERT_TRUE(words->enqueue(200, [&] { ++ran; }, reused));
  EXPECT_EQ(reused.reachedWord, old.reachedWord);
  EXPECT_GT(reused.sequence, old.sequence);
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(ran.load(), 0) << "ran on the old key's `reached`";
  __atomic_store_n(word(reused.reachedWord), reused.sequence, __ATOMIC_RELEASE);
  ASSERT_TRUE(waitFor([&] { return ran.load() == 1; }));
}

// Released while callbacks are pending: the words stay the key's until they have run.
TEST(HostCallbackWords, AReleasedKeyKeepsItsWordsUntilItsCallbacksRan) {
  Region region;
  auto words = HostCallbackWords::open(region.map(), [] {});
  ASSERT_NE(words, nullptr);
  std::atomic<int> ran{0};
  HostCallbackWords::Ticket pending, other;
  ASSERT_TRUE(words->enqueue(100, [&] { ++ran; }, pending));
  words->release(100);
  ASSERT_TRUE(words->enqueue(200, [] {}, other));
  EXPECT_NE(other.reachedWord, pending.reachedWord) << "words handed out while a callback waits on them";
  __atomic_store_n(word(pending.reachedWord), pending.sequence, __ATOMIC_RELEASE);
  ASSERT_TRUE(waitFor([&] { return ran.load() == 1; }));
  ASSERT_TRUE(waitFor([&] { return __atomic_load_n(word(pending.doneWord), __ATOMIC_ACQUIRE) == pending.sequence; }));
  std::this_thread::sleep_for(5ms);  // the pair is given back right after `done` is written
  HostCallbackWords::Ticket third;
  ASSERT_TRUE(words->enqueue(300, [] {}, third));
  EXPECT_EQ(third.reachedWord, pending.reachedWord) << "the words were not given back after the callback ran";
}

}  // namespace
}  // namespace tally::client
