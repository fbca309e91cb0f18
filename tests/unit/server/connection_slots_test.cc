// max_connections (finding 6): slots are taken up to the limit, refused beyond it, and given
// back when their holder ends, wherever that happens.
#include "server/transport/connection_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace tally::server::transport {
namespace {

TEST(ConnectionSlots, RefusesOverTheLimitAndCountsRefusals) {
  ConnectionSlots slots(2);
  ConnectionSlot a = slots.tryTake();
  ConnectionSlot b = slots.tryTake();
  EXPECT_TRUE(a.held());
  EXPECT_TRUE(b.held());
  EXPECT_FALSE(slots.tryTake().held());
  EXPECT_FALSE(slots.tryTake().held());
  EXPECT_EQ(slots.inUse(), 2u);
  EXPECT_EQ(slots.refused(), 2u);
}

TEST(ConnectionSlots, AnEndedHolderGivesItsSlotBack) {
  ConnectionSlots slots(1);
  {
    ConnectionSlot first = slots.tryTake();
    ASSERT_TRUE(first.held());
    ConnectionSlot moved = std::move(first);  // handed on, e.g. to a TLS handshake thread
    EXPECT_EQ(slots.inUse(), 1u);
    EXPECT_FALSE(slots.tryTake().held());
  }
  EXPECT_EQ(slots.inUse(), 0u);
  ConnectionSlot again = slots.tryTake();
  EXPECT_TRUE(again.held());
  again = ConnectionSlot();  // assigning over a held slot gives it back
  EXPECT_EQ(slots.inUse(), 0u);
}

TEST(ConnectionSlots, ASlotMayOutliveItsCounter) {
  ConnectionSlot survivor;
  {
    ConnectionSlots slots(1);
    survivor = slots.tryTake();
  }
  EXPECT_TRUE(survivor.held());
  survivor = ConnectionSlot();  // no use of freed memory (ASan would say)
}

TEST(ConnectionSlots, ConcurrentTakersNeverExceedTheLimit) {
  ConnectionSlots slots(8);
  std::vector<std::thread> threads;
  std::atomic<int> held{0}, peak{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        ConnectionSlot s = slots.tryTake();
        if (!s.held()) continue;
        int now = held.fetch_add(1) + 1;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        held.fetch_sub(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 8);
  EXPECT_EQ(slots.inUse(), 0u);
}

}  // namespace
}  // namespace tally::server::transport
