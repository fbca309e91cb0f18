// MemoryTable: which device ranges a tenant owns, the quota, and what unloading a module takes
// away (issue 13, finding 4). No GPU: the GPU pointers are only compared, never used.
#include "server/session/memory_table.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tally::server::session {
namespace {

gpu::Gpu* fakeGpu(uintptr_t n) { return reinterpret_cast<gpu::Gpu*>(n); }

struct MemoryTableTest : testing::Test {
  std::atomic<uint64_t> published{0};
  MemoryTable table{1000, "tenant 1 (test)", published};
};

TEST_F(MemoryTableTest, OwnsExactlyTheRangesItWasGiven) {
  table.addAllocation(0x1000, 0x100, fakeGpu(1));
  EXPECT_EQ(table.ownerOf(0x1000, 0x100), fakeGpu(1));
  EXPECT_EQ(table.ownerOf(0x10ff, 1), fakeGpu(1));
  EXPECT_EQ(table.ownerOf(0x10ff, 2), nullptr);  // runs past the end
  EXPECT_EQ(table.ownerOf(0xfff, 1), nullptr);   // before it
  EXPECT_EQ(table.ownerOf(0x1100, 1), nullptr);  // one past the end
  EXPECT_EQ(table.ownerOf(0x1010, SIZE_MAX), nullptr);  // a size that would wrap
}

TEST_F(MemoryTableTest, FreeingTakesOnlyAnAllocationByItsBase) {
  table.addAllocation(0x1000, 0x100, fakeGpu(1));
  table.addGlobal(0x2000, 8, fakeGpu(1), 7);
  EXPECT_EQ(published.load(), 0x100u);
  EXPECT_FALSE(table.takeAllocation(0x1010).has_value());  // interior pointer
  EXPECT_FALSE(table.takeAllocation(0x2000).has_value());  // a module global is not freed by cudaFree
  std::optional<MemoryTable::Range> freed = table.takeAllocation(0x1000);
  ASSERT_TRUE(freed.has_value());
  EXPECT_EQ(freed->size, 0x100u);
  EXPECT_EQ(freed->gpu, fakeGpu(1));
  EXPECT_EQ(table.allocatedBytes(), 0u);
  EXPECT_EQ(published.load(), 0u);
  EXPECT_EQ(table.ownerOf(0x1000, 1), nullptr);
  EXPECT_FALSE(table.takeAllocation(0x1000).has_value());  // a double free
}

TEST_F(MemoryTableTest, QuotaCountsAllocationsButNotGlobals) {
  table.addAllocation(0x1000, 600, fakeGpu(1));
  table.addGlobal(0x9000, 4096, fakeGpu(1), 7);
  EXPECT_TRUE(table.quotaAllows(400));
  EXPECT_FALSE(table.quotaAllows(401));
  ASSERT_TRUE(table.takeAllocation(0x1000).has_value());
  EXPECT_TRUE(table.quotaAllows(1000));
}

TEST_F(MemoryTableTest, UnloadingAModuleTakesAwayItsGlobalsOnly) {
  table.addAllocation(0x1000, 0x100, fakeGpu(1));
  table.addGlobal(0x2000, 16, fakeGpu(1), 7);
  table.addGlobal(0x3000, 32, fakeGpu(2), 7);
  table.addGlobal(0x4000, 16, fakeGpu(1), 8);
  auto taken = table.takeGlobalsOf(7);
  ASSERT_EQ(taken.size(), 2u);  // returned so that they can be cleared before the unload
  EXPECT_EQ(taken[1].first, 0x3000u);
  EXPECT_EQ(taken[1].second.size, 32u);
  EXPECT_EQ(taken[1].second.gpu, fakeGpu(2));
  EXPECT_EQ(table.ownerOf(0x2000, 16), nullptr);
  EXPECT_EQ(table.ownerOf(0x3000, 4), nullptr);
  EXPECT_EQ(table.ownerOf(0x4000, 16), fakeGpu(1));  // another module's global stays
  EXPECT_EQ(table.ownerOf(0x1000, 0x100), fakeGpu(1));  // and so do allocations
  EXPECT_EQ(table.allocatedBytes(), 0x100u);
  EXPECT_TRUE(table.takeGlobalsOf(7).empty());
}

TEST_F(MemoryTableTest, EndOfTenancyTakesEverything) {
  table.addAllocation(0x1000, 0x100, fakeGpu(1));
  table.addAllocation(0x5000, 0x200, fakeGpu(2));
  table.addGlobal(0x2000, 16, fakeGpu(1), 7);
  auto taken = table.takeAll();
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_EQ(taken[0].first, 0x1000u);
  EXPECT_FALSE(taken[1].second.allocation);
  EXPECT_EQ(taken[1].second.module, 7u);
  EXPECT_EQ(taken[2].second.gpu, fakeGpu(2));
  EXPECT_EQ(table.allocatedBytes(), 0u);
  EXPECT_EQ(published.load(), 0u);
  EXPECT_EQ(table.rangeCount(), 0u);
}

}  // namespace
}  // namespace tally::server::session
