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

namespace tally::server::session {
namespace {

// --- virtual memory: mapped pieces of reservations ------------------------------------------

TEST_F(MemoryTableTest, AdjacentMappingsFormOneUsableRange) {
  table.addMapping(0x10000, 0x1000, fakeGpu(1));
  table.addMapping(0x11000, 0x1000, fakeGpu(1));
  table.addMapping(0x13000, 0x1000, fakeGpu(1));  // a hole at 0x12000
  EXPECT_EQ(table.ownerOf(0x10800, 0x1000), fakeGpu(1));   // across the seam
  EXPECT_EQ(table.ownerOf(0x10000, 0x2000), fakeGpu(1));
  EXPECT_EQ(table.ownerOf(0x11800, 0x1000), nullptr);      // into the hole
  EXPECT_EQ(table.ownerOf(0x12000, 1), nullptr);
  EXPECT_EQ(table.ownerOf(0x10000, SIZE_MAX), nullptr);
  EXPECT_EQ(table.allocatedBytes(), 0u);  // the handles carry the quota, not the mappings
}

TEST_F(MemoryTableTest, AllocationsDoNotContinueIntoNeighbours) {
  table.addAllocation(0x1000, 0x100, fakeGpu(1));
  table.addAllocation(0x1100, 0x100, fakeGpu(1));
  EXPECT_EQ(table.ownerOf(0x1080, 0x100), nullptr);  // two cudaMallocs are two objects, as natively
}

TEST_F(MemoryTableTest, UnmappingRemovesExactlyTheMapping) {
  table.addMapping(0x10000, 0x1000, fakeGpu(1));
  EXPECT_FALSE(table.takeMapping(0x10000, 0x800));  // not the whole mapping
  EXPECT_FALSE(table.takeAllocation(0x10000).has_value());  // cudaFree cannot free a mapping
  EXPECT_TRUE(table.takeMapping(0x10000, 0x1000));
  EXPECT_EQ(table.ownerOf(0x10000, 1), nullptr);
  EXPECT_FALSE(table.takeMapping(0x10000, 0x1000));
}

TEST_F(MemoryTableTest, HandlesChargeTheQuota) {
  table.charge(600);
  EXPECT_FALSE(table.quotaAllows(401));
  table.uncharge(600);
  EXPECT_TRUE(table.quotaAllows(1000));
  EXPECT_EQ(published.load(), 0u);
}

// --- IPC: exported allocations and imports ----------------------------------------------------

std::shared_ptr<IpcMemoryGrant> grantFor(MemoryTable& owner, CUdeviceptr ptr, uint64_t ownerId) {
  auto allocation = owner.allocationContaining(ptr);
  if (!allocation) return nullptr;
  auto grant = std::make_shared<IpcMemoryGrant>();
  grant->owner = ownerId;
  grant->base = allocation->first;
  grant->size = allocation->second->size;
  grant->gpu = allocation->second->gpu;
  allocation->second->grant = grant;
  return grant;
}

struct IpcTablesTest : testing::Test {
  std::atomic<uint64_t> ownerPublished{0}, receiverPublished{0};
  MemoryTable owner{0, "tenant 1 (owner)", ownerPublished};
  MemoryTable receiver{1000, "tenant 2 (receiver)", receiverPublished};
};

TEST_F(IpcTablesTest, OnlyAllocationsAreExported) {
  owner.addAllocation(0x1000, 0x100, fakeGpu(1));
  owner.addGlobal(0x2000, 16, fakeGpu(1), 7);
  owner.addMapping(0x10000, 0x1000, fakeGpu(1));
  auto found = owner.allocationContaining(0x1080);  // an interior pointer names its allocation
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->first, 0x1000u);
  EXPECT_FALSE(owner.allocationContaining(0x1100).has_value());
  EXPECT_FALSE(owner.allocationContaining(0x2000).has_value());
  EXPECT_FALSE(owner.allocationContaining(0x10000).has_value());
}

TEST_F(IpcTablesTest, AnImportIsUsableButNotOwnedAndCostsNoQuota) {
  owner.addAllocation(0x1000, 0x100, fakeGpu(1));
  receiver.addImport(grantFor(owner, 0x1000, 1));
  EXPECT_EQ(receiver.ownerOf(0x1000, 0x100), fakeGpu(1));
  EXPECT_EQ(receiver.ownerOf(0x1000, 0x101), nullptr);  // exactly that allocation
  EXPECT_EQ(receiver.ownedBy(0x1000, 1), nullptr);
  EXPECT_FALSE(receiver.takeAllocation(0x1000).has_value());  // cannot free it
  EXPECT_FALSE(receiver.allocationContaining(0x1000).has_value());  // nor export it again
  EXPECT_EQ(receiver.allocatedBytes(), 0u);
}

TEST_F(IpcTablesTest, FreeingRevokesEveryImport) {
  owner.addAllocation(0x1000, 0x100, fakeGpu(1));
  auto grant = grantFor(owner, 0x1000, 1);
  receiver.addImport(grant);
  ASSERT_TRUE(owner.takeAllocation(0x1000).has_value());
  EXPECT_FALSE(grant->live.load());
  EXPECT_EQ(receiver.ownerOf(0x1000, 1), nullptr);
  // The address comes back to the receiver as its own allocation: the dead import does not shadow it.
  receiver.addAllocation(0x1000, 0x80, fakeGpu(1));
  EXPECT_EQ(receiver.ownerOf(0x1000, 0x80), fakeGpu(1));
  EXPECT_EQ(receiver.ownerOf(0x1000, 0x100), nullptr);
}

TEST_F(IpcTablesTest, TheOwnerLeavingRevokesEveryImport) {
  owner.addAllocation(0x1000, 0x100, fakeGpu(1));
  auto grant = grantFor(owner, 0x1000, 1);
  receiver.addImport(grant);
  owner.takeAll();
  EXPECT_EQ(receiver.ownerOf(0x1000, 1), nullptr);
}

TEST_F(IpcTablesTest, EachOpenNeedsAClose) {
  owner.addAllocation(0x1000, 0x100, fakeGpu(1));
  auto grant = grantFor(owner, 0x1000, 1);
  receiver.addImport(grant);
  receiver.addImport(grant);
  EXPECT_TRUE(receiver.closeImport(0x1000));
  EXPECT_EQ(receiver.ownerOf(0x1000, 1), fakeGpu(1));
  EXPECT_TRUE(receiver.closeImport(0x1000));
  EXPECT_EQ(receiver.ownerOf(0x1000, 1), nullptr);
  EXPECT_FALSE(receiver.closeImport(0x1000));
  EXPECT_FALSE(owner.closeImport(0x1000));  // the owner never opened it
}

TEST_F(IpcTablesTest, TheReceiverLeavingLeavesTheOwnerAlone) {
  owner.addAllocation(0x1000, 0x100, fakeGpu(1));
  auto grant = grantFor(owner, 0x1000, 1);
  receiver.addImport(grant);
  receiver.takeAll();
  EXPECT_TRUE(grant->live.load());
  EXPECT_EQ(owner.ownerOf(0x1000, 0x100), fakeGpu(1));
  EXPECT_EQ(receiver.importCount(), 0u);
}

}  // namespace
}  // namespace tally::server::session
