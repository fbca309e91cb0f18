// CallbackTable: only ids the client issued run; an id from anywhere else is refused.
#include "client/runtime/callback_table.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tally::client {
namespace {

void mustNotRun() { FAIL() << "a code address from the wire was called"; }

TEST(CallbackTable, AnIssuedIdRunsItsCallbackOnce) {
  CallbackTable table;
  int runs = 0;
  uint64_t id = table.issue([&] { ++runs; });
  auto callback = table.take(id);
  ASSERT_TRUE(callback.has_value());
  (*callback)();
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(table.take(id).has_value());  // a replayed notice is refused
  EXPECT_EQ(table.size(), 0u);
}

TEST(CallbackTable, AnUnknownIdIsRefused) {
  CallbackTable table;
  table.issue([] {});
  EXPECT_FALSE(table.take(0).has_value());
  EXPECT_FALSE(table.take(999).has_value());
  // What a hostile tallyd would send under the old protocol: a code address.
  EXPECT_FALSE(table.take(reinterpret_cast<uint64_t>(&mustNotRun)).has_value());
  EXPECT_EQ(table.size(), 1u);
}

TEST(CallbackTable, IdsAreDistinct) {
  CallbackTable table;
  uint64_t a = table.issue([] {});
  uint64_t b = table.issue([] {});
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace tally::client
