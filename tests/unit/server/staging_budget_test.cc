#include "server/gpu/staging_pool.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <thread>

namespace tally::server::gpu {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(StagingBudget, UnderTheSoftLimitNothingWaits) {
  StagingBudget budget(100, 800, milliseconds(5000));
  auto start = Clock::now();
  EXPECT_TRUE(budget.acquire(60));
  EXPECT_TRUE(budget.acquire(40));
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
  EXPECT_EQ(budget.held(), 100u);
}

TEST(StagingBudget, OneRequestLargerThanTheBudgetPassesWhenNothingIsHeld) {
  StagingBudget budget(100, 800, milliseconds(5000));
  EXPECT_TRUE(budget.acquire(300));
  EXPECT_EQ(budget.held(), 300u);
  budget.release(300);
  EXPECT_EQ(budget.held(), 0u);
}

TEST(StagingBudget, OverTheSoftLimitWaitsForItsOwnBuffersToComeBack) {
  StagingBudget budget(100, 800, milliseconds(5000));
  ASSERT_TRUE(budget.acquire(100));
  std::thread giver([&] {
    std::this_thread::sleep_for(milliseconds(100));
    budget.release(100);
  });
  auto start = Clock::now();
  EXPECT_TRUE(budget.acquire(50));
  auto waited = Clock::now() - start;
  giver.join();
  EXPECT_GE(waited, milliseconds(90));     // it waited for the release ...
  EXPECT_LT(waited, milliseconds(4000));   // ... not for the whole bound
  EXPECT_EQ(budget.held(), 50u);
}

TEST(StagingBudget, TheWaitIsBoundedThenItGoesOverUpToTheHardLimit) {
  StagingBudget budget(100, 250, milliseconds(50));
  ASSERT_TRUE(budget.acquire(100));
  auto start = Clock::now();
  EXPECT_TRUE(budget.acquire(100));  // nothing comes back: goes over after the wait
  EXPECT_GE(Clock::now() - start, milliseconds(45));
  EXPECT_EQ(budget.held(), 200u);
  EXPECT_FALSE(budget.acquire(100));  // 300 would pass the hard limit
  EXPECT_EQ(budget.held(), 200u);
}

TEST(StagingBudget, ARequestPastTheHardLimitIsRefusedEvenWhenNothingIsHeld) {
  // Before: a tenant holding nothing got any size, so one copy could pin host memory as large
  // as a GPU allocation.
  StagingBudget budget(100, 800, milliseconds(5000));
  auto start = Clock::now();
  EXPECT_FALSE(budget.acquire(801));
  EXPECT_LT(Clock::now() - start, milliseconds(1000));  // refused at once, no wait
  EXPECT_EQ(budget.held(), 0u);
  EXPECT_TRUE(budget.acquire(800));
}

// Pinned memory from the heap, counting what is live, so the pool runs without a GPU.
struct FakePinned {
  std::set<void*> live;
  size_t allocations = 0;
  PinnedMemory memory() {
    return PinnedMemory{[this](size_t size) {
                          ++allocations;
                          void* p = std::malloc(size);
                          live.insert(p);
                          return p;
                        },
                        [this](void* p) {
                          live.erase(p);
                          std::free(p);
                        }};
  }
};

constexpr size_t kMiB = 1 << 20;

TEST(StagingPool, OneCallCannotPinMoreThanTheTenantsHardLimit) {
  FakePinned pinned;
  StagingPool pool(pinned.memory(), 1ull << 40, 0);
  auto budget = std::make_shared<StagingBudget>(64 * kMiB, 512 * kMiB, milliseconds(10));
  EXPECT_EQ(pool.take(1ull << 30, budget), nullptr);
  EXPECT_EQ(pinned.allocations, 0u);
  EXPECT_EQ(budget->held(), 0u);
}

TEST(StagingPool, APieceAlwaysFitsTheBudgetOfAnIdleTenant) {
  EXPECT_EQ(StagingPool::pieceLimit(nullptr), StagingPool::kMaxPiece);
  StagingBudget large(64 * kMiB, 512 * kMiB, milliseconds(10));
  EXPECT_EQ(StagingPool::pieceLimit(&large), StagingPool::kMaxPiece);
  FakePinned pinned;
  StagingPool pool(pinned.memory(), 1ull << 40, 0);
  // The smallest budget the configuration allows (staging_mib = 1, hard limit 8x).
  auto small = std::make_shared<StagingBudget>(kMiB, 8 * kMiB, milliseconds(10));
  size_t piece = StagingPool::pieceLimit(small.get());
  EXPECT_LE(piece * 4, 8 * kMiB);
  std::vector<std::shared_ptr<StagingBuffer>> held;
  for (int i = 0; i < 4; ++i) {  // four pieces in flight fit within the hard limit
    held.push_back(pool.take(piece, small));
    ASSERT_NE(held.back(), nullptr);
  }
}

TEST(StagingPool, IdleBuffersPastTheHighWaterMarkGoBackOnceNoTenantIsLeft) {
  FakePinned pinned;
  StagingPool pool(pinned.memory(), 1ull << 40, 32 * kMiB);
  pool.noteTenantsPresent();
  {
    std::vector<std::shared_ptr<StagingBuffer>> buffers;
    for (int i = 0; i < 4; ++i) buffers.push_back(pool.take(16 * kMiB, nullptr));
    EXPECT_EQ(pool.pinnedBytes(), 64 * kMiB);
  }
  // Tenants are present: freeing would wait for their kernels, so the buffers stay for reuse.
  EXPECT_EQ(pool.idleBytes(), 64 * kMiB);
  EXPECT_EQ(pinned.live.size(), 4u);
  EXPECT_EQ(pool.noteNoTenant(), 32 * kMiB);
  EXPECT_EQ(pool.pinnedBytes(), 32 * kMiB);
  EXPECT_EQ(pinned.live.size(), 2u);
}

TEST(StagingPool, ABufferReturnedAfterTheLastTenantLeftIsGivenBackWhenReturned) {
  FakePinned pinned;
  StagingPool pool(pinned.memory(), 1ull << 40, 0);
  pool.noteTenantsPresent();
  auto late = pool.take(16 * kMiB, nullptr);  // e.g. still in a departed tenant's outbox
  EXPECT_EQ(pool.noteNoTenant(), 0u);
  late.reset();
  EXPECT_EQ(pool.pinnedBytes(), 0u);
  EXPECT_TRUE(pinned.live.empty());
  // A tenant arrives: returned buffers are kept for reuse again.
  pool.noteTenantsPresent();
  pool.take(16 * kMiB, nullptr).reset();
  EXPECT_EQ(pool.idleBytes(), 16 * kMiB);
  EXPECT_EQ(pinned.live.size(), 1u);
}

}  // namespace
}  // namespace tally::server::gpu
