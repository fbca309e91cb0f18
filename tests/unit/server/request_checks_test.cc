// The handlers' pure checks (server/api/request_checks.h): ranges of pitched copies and memsets,
// staging pieces, context-limit maxima and charges, launch priority clamping.
#include "server/api/request_checks.h"

#include <gtest/gtest.h>

#include <limits>

namespace tally::server::api {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

TEST(CheckedProduct, WrapsAreRefused) {
  EXPECT_EQ(checkedProduct(1000, 4), 4000u);
  EXPECT_EQ(checkedProduct(kMax, 1), kMax);
  // The memset finding: 2^62 elements of 4 bytes wrap to 0 bytes, which any owned range "holds".
  EXPECT_EQ(checkedProduct(uint64_t(1) << 62, 4), std::nullopt);
  EXPECT_EQ(checkedProduct((kMax / 2) + 1, 2), std::nullopt);
}

TEST(PitchOr, ZeroMeansPacked) {
  EXPECT_EQ(pitchOr(0, 640), 640u);
  EXPECT_EQ(pitchOr(1024, 640), 1024u);
}

TEST(RegionExtent, LastRowNeedsOnlyItsWidth) {
  EXPECT_EQ(regionExtent({100, 3, 128}), 2 * 128 + 100u);
  EXPECT_EQ(regionExtent({100, 1, 0}), 100u);  // one row: the pitch is never applied
  EXPECT_EQ(regionExtent({100, 0, 128}), 0u);
  EXPECT_EQ(regionExtent({kMax, 1, 0}), kMax);  // a flat copy's size is bounded by the ownership check
}

TEST(RegionExtent, PitchWrapIsRefused) {
  // Before: pitch * (height - 1) + width wrapped to a small extent that passed the range check.
  // 2^32 * 2^32 wraps to 0 (+ width 16 = 16 bytes); with the bound the pitch alone is refused.
  EXPECT_EQ(regionExtent({16, (uint64_t(1) << 32) + 1, uint64_t(1) << 32}), std::nullopt);
  // A legal pitch with a height that makes the product wrap.
  EXPECT_EQ(regionExtent({16, kMax, kMaxPitch}), std::nullopt);
  // Adding the width is what wraps.
  uint64_t rows = kMax / kMaxPitch + 1;  // pitch * (rows - 1) <= kMax, + width > kMax
  EXPECT_EQ(regionExtent({kMaxPitch, rows, kMaxPitch}), std::nullopt);
}

TEST(RegionExtent, PitchMustHoldTheRowAndStayWithinTheDriverMaximum) {
  EXPECT_EQ(regionExtent({256, 2, 255}), std::nullopt);
  EXPECT_EQ(regionExtent({256, 2, kMaxPitch + 1}), std::nullopt);
  EXPECT_EQ(regionExtent({256, 2, kMaxPitch}), kMaxPitch + 256);
}

uint64_t totalBytes(const std::vector<CopyPiece>& pieces) {
  uint64_t total = 0;
  for (const CopyPiece& p : pieces) total += p.bytes();
  return total;
}

TEST(SplitIntoPieces, WholeRowsWhileARowFits) {
  auto pieces = splitIntoPieces(1000, 10, 4096);  // 4 rows a piece
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].rows, 4u);
  EXPECT_EQ(pieces[2].row, 8u);
  EXPECT_EQ(pieces[2].rows, 2u);
  EXPECT_EQ(pieces[1].packedOffset(1000), 4000u);
  EXPECT_EQ(totalBytes(pieces), 10000u);
}

TEST(SplitIntoPieces, AWideRowIsCutIntoColumnsAndNoPieceExceedsTheLimit) {
  // The staging finding: a 2D copy with a row wider than any budget took one buffer per row.
  const uint64_t width = (uint64_t(5) << 30) + 7, limit = 16 << 20;
  auto pieces = splitIntoPieces(width, 2, limit);
  uint64_t expected = 0;
  for (const CopyPiece& p : pieces) {
    EXPECT_LE(p.bytes(), limit);
    EXPECT_EQ(p.packedOffset(width), expected);  // in the order of the packed bulk bytes
    expected += p.bytes();
  }
  EXPECT_EQ(expected, 2 * width);
  EXPECT_EQ(pieces.back().row, 1u);
  EXPECT_EQ(pieces.back().rowBytes, width % limit);
}

TEST(SplitIntoPieces, NothingToCopyGivesNoPiece) {
  EXPECT_TRUE(splitIntoPieces(0, 5, 64).empty());
  EXPECT_TRUE(splitIntoPieces(5, 0, 64).empty());
}

TEST(ContextLimits, MaximaComeFromTheTenantsLimits) {
  session::TenantLimits limits;
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_STACK_SIZE), limits.maxStackBytes);
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_MALLOC_HEAP_SIZE), limits.maxMallocHeapBytes);
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_PRINTF_FIFO_SIZE), limits.maxPrintfFifoBytes);
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT), limits.maxPendingLaunches);
  EXPECT_GT(limits.maxStackBytes, 0u);  // sane defaults: capped unless the operator says otherwise
  EXPECT_LT(limits.maxStackBytes, 1u << 20);
  limits.maxStackBytes = 0;
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_STACK_SIZE), kMax);  // 0: no maximum
}

TEST(ContextLimits, LimitsThatChangeOtherTenantsAreNeverAllowed) {
  session::TenantLimits limits;
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_PERSISTING_L2_CACHE_SIZE), std::nullopt);
  EXPECT_EQ(contextLimitMaximum(limits, CU_LIMIT_MAX_L2_FETCH_GRANULARITY), std::nullopt);
}

TEST(ContextLimits, HeapAndPrintfBytesAreChargedTheStackIsNot) {
  std::map<int, size_t> requested{{CU_LIMIT_MALLOC_HEAP_SIZE, 256 << 20},
                                  {CU_LIMIT_PRINTF_FIFO_SIZE, 4 << 20},
                                  {CU_LIMIT_STACK_SIZE, 8 << 10}};
  EXPECT_EQ(contextLimitCharge(requested), (256u << 20) + (4u << 20));
  EXPECT_EQ(contextLimitCharge({}), 0u);
  EXPECT_EQ(contextLimitCharge({{CU_LIMIT_MALLOC_HEAP_SIZE, kMax}, {CU_LIMIT_PRINTF_FIFO_SIZE, 2}}), kMax);
}

TEST(LaunchPriority, BestEffortCannotBeMoreUrgentThanItsBand) {
  // Device range [-5, 0]; the priority policy puts best-effort tenants at 0 (least).
  EXPECT_EQ(clampLaunchPriority(-5, -5, 0, 0), 0);
  EXPECT_EQ(clampLaunchPriority(-3, -5, 0, 0), 0);
  EXPECT_EQ(clampLaunchPriority(0, -5, 0, 0), 0);
}

TEST(LaunchPriority, HighPriorityAndUnbandedTenantsKeepTheirChoiceWithinTheDeviceRange) {
  EXPECT_EQ(clampLaunchPriority(-3, -5, 0, -5), -3);
  EXPECT_EQ(clampLaunchPriority(-3, -5, 0, std::nullopt), -3);
  EXPECT_EQ(clampLaunchPriority(-100, -5, 0, std::nullopt), -5);
  EXPECT_EQ(clampLaunchPriority(100, -5, 0, -5), 0);
}

}  // namespace
}  // namespace tally::server::api

namespace tally::server::api {
namespace {

// Fuzzer finding: a limit id from the wire was cast to CUlimit unchecked (undefined behaviour,
// and the driver would have seen a value no header names).
TEST(EnumFromWire, ValuesPastTheEnumAreRefused) {
  EXPECT_EQ(enumFromWire(uint64_t(CU_LIMIT_STACK_SIZE), CU_LIMIT_MAX), std::optional<CUlimit>(CU_LIMIT_STACK_SIZE));
  EXPECT_FALSE(enumFromWire(uint64_t(CU_LIMIT_MAX), CU_LIMIT_MAX).has_value());
  EXPECT_FALSE(enumFromWire(uint64_t(577176782), CU_LIMIT_MAX).has_value());
  EXPECT_FALSE(enumFromWire(~uint64_t(0), CU_FUNC_ATTRIBUTE_MAX).has_value());
}

}  // namespace
}  // namespace tally::server::api
