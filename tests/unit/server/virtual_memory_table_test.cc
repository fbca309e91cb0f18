// VirtualMemoryTable: the ownership rules of cuMemCreate / cuMemAddressReserve / cuMemMap.
// No GPU: handles and GPUs are only compared, never used.
#include "server/session/virtual_memory_table.h"

#include <gtest/gtest.h>

namespace tally::server::session {
namespace {

gpu::Gpu* fakeGpu(uintptr_t n) { return reinterpret_cast<gpu::Gpu*>(n); }

struct VirtualMemoryTableTest : testing::Test {
  VirtualMemoryTable vm{"tenant 1 (test)"};
  void SetUp() override {
    vm.addHandle(7, {0xabc, 0x4000, fakeGpu(1)});
    vm.addReservation(0x100000, 0x10000);
  }
};

TEST_F(VirtualMemoryTableTest, HandleIdsAreUnique) {
  EXPECT_EQ(vm.admitHandle(7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vm.admitHandle(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vm.admitHandle(8), CUDA_SUCCESS);
}

TEST_F(VirtualMemoryTableTest, MapsOnlyOwnHandlesInsideOwnReservations) {
  EXPECT_EQ(vm.admitMap(0x100000, 0x4000, 0, 8), CUDA_ERROR_INVALID_HANDLE);   // not this tenant's handle
  EXPECT_EQ(vm.admitMap(0x200000, 0x4000, 0, 7), CUDA_ERROR_INVALID_VALUE);    // outside any reservation
  EXPECT_EQ(vm.admitMap(0x10e000, 0x4000, 0, 7), CUDA_ERROR_INVALID_VALUE);    // runs past the reservation
  EXPECT_EQ(vm.admitMap(0x100000, 0x4000, 0x1000, 7), CUDA_ERROR_INVALID_VALUE);  // past the handle
  EXPECT_EQ(vm.admitMap(0x100000, 0, 0, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vm.admitMap(UINT64_MAX - 0xfff, 0x4000, 0, 7), CUDA_ERROR_INVALID_VALUE);  // wraps
  EXPECT_EQ(vm.admitMap(0x100000, 0x4000, SIZE_MAX, 7), CUDA_ERROR_INVALID_VALUE);      // offset wraps
  EXPECT_EQ(vm.admitMap(0x104000, 0x4000, 0, 7), CUDA_SUCCESS);
}

TEST_F(VirtualMemoryTableTest, MappingsNeverOverlap) {
  vm.addMapping(0x104000, 0x4000, 7);
  EXPECT_EQ(vm.admitMap(0x104000, 0x1000, 0, 7), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vm.admitMap(0x102000, 0x4000, 0, 7), CUDA_ERROR_INVALID_VALUE);  // reaches into it
  EXPECT_EQ(vm.admitMap(0x107000, 0x2000, 0, 7), CUDA_ERROR_INVALID_VALUE);  // starts inside it
  EXPECT_EQ(vm.admitMap(0x100000, 0x4000, 0, 7), CUDA_SUCCESS);              // just before it
  EXPECT_EQ(vm.admitMap(0x108000, 0x4000, 0, 7), CUDA_SUCCESS);              // just after it
}

TEST_F(VirtualMemoryTableTest, UnmapNeedsWholeMappings) {
  vm.addMapping(0x100000, 0x4000, 7);
  vm.addMapping(0x104000, 0x4000, 7);
  EXPECT_FALSE(vm.mappingsTiling(0x100000, 0x2000).has_value());
  EXPECT_FALSE(vm.mappingsTiling(0x102000, 0x4000).has_value());
  EXPECT_FALSE(vm.mappingsTiling(0x100000, 0xc000).has_value());
  auto both = vm.mappingsTiling(0x100000, 0x8000);
  ASSERT_TRUE(both.has_value());
  EXPECT_EQ(both->size(), 2u);
}

TEST_F(VirtualMemoryTableTest, AReleasedHandleGoesWithItsLastMapping) {
  vm.addMapping(0x100000, 0x4000, 7);
  vm.addMapping(0x104000, 0x4000, 7);
  bool known = false;
  EXPECT_FALSE(vm.release(7, known).has_value());  // still mapped: memory stays
  EXPECT_TRUE(known);
  EXPECT_FALSE(vm.removeMapping(0x100000).has_value());
  auto gone = vm.removeMapping(0x104000);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->handle, 0xabcu);
  EXPECT_TRUE(gone->dirty);
  EXPECT_EQ(vm.handleCount(), 0u);
  EXPECT_FALSE(vm.release(7, known).has_value());  // a double release
  EXPECT_FALSE(known);
}

TEST_F(VirtualMemoryTableTest, AnUnmappedHandleGoesAtRelease) {
  bool known = false;
  auto gone = vm.release(7, known);
  ASSERT_TRUE(gone.has_value());
  EXPECT_FALSE(gone->dirty);  // never mapped: holds nothing to clear
  EXPECT_FALSE(vm.release(8, known).has_value());
  EXPECT_FALSE(known);
}

TEST_F(VirtualMemoryTableTest, RetainAddsAReference) {
  vm.addMapping(0x100000, 0x4000, 7);
  EXPECT_FALSE(vm.retain(0x104000).has_value());
  EXPECT_EQ(vm.retain(0x101000), std::optional<uint64_t>(7));
  bool known = false;
  vm.release(7, known);
  vm.release(7, known);
  EXPECT_TRUE(known);
  auto gone = vm.removeMapping(0x100000);
  EXPECT_TRUE(gone.has_value());
}

TEST_F(VirtualMemoryTableTest, AddressFreeNeedsTheWholeUnmappedReservation) {
  EXPECT_EQ(vm.admitAddressFree(0x100000, 0x8000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(vm.admitAddressFree(0x104000, 0xc000), CUDA_ERROR_INVALID_VALUE);
  vm.addMapping(0x10c000, 0x4000, 7);
  EXPECT_EQ(vm.admitAddressFree(0x100000, 0x10000), CUDA_ERROR_INVALID_VALUE);
  vm.removeMapping(0x10c000);
  EXPECT_EQ(vm.admitAddressFree(0x100000, 0x10000), CUDA_SUCCESS);
}

TEST_F(VirtualMemoryTableTest, EndOfTenancyTakesEverything) {
  vm.addMapping(0x100000, 0x4000, 7);
  auto all = vm.takeAll();
  EXPECT_EQ(all.mappings.size(), 1u);
  EXPECT_EQ(all.reservations.size(), 1u);
  ASSERT_EQ(all.handles.size(), 1u);
  EXPECT_EQ(all.handles[0].mappings, 1u);
  EXPECT_EQ(vm.handleCount() + vm.reservationCount() + vm.mappingCount(), 0u);
}

}  // namespace
}  // namespace tally::server::session
