// gpu::ModulePool with a recording unload: which instances come back, which are unloaded, when.
#include "server/gpu/module_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tally::server::gpu {
namespace {

CUmodule fakeModule(uintptr_t n) { return reinterpret_cast<CUmodule>(n); }

struct PoolTest : testing::Test {
  std::vector<CUmodule> unloaded;
  ModulePool pool{2, [this](CUmodule m) { unloaded.push_back(m); }};
};

TEST_F(PoolTest, AnInstanceGoesOnlyToTheSameImage) {
  pool.give("a", fakeModule(1));
  EXPECT_EQ(pool.take("b"), nullptr);
  EXPECT_EQ(pool.take("a"), fakeModule(1));
  EXPECT_EQ(pool.take("a"), nullptr);  // handed out once
  EXPECT_TRUE(unloaded.empty());
}

TEST_F(PoolTest, BeyondTheLimitTheOldestIsUnloaded) {
  pool.give("a", fakeModule(1));
  pool.give("b", fakeModule(2));
  pool.give("a", fakeModule(3));
  ASSERT_EQ(unloaded, std::vector<CUmodule>{fakeModule(1)});
  EXPECT_EQ(pool.idleCount(), 2u);
  EXPECT_EQ(pool.take("a"), fakeModule(3));
  EXPECT_EQ(pool.take("b"), fakeModule(2));
}

TEST_F(PoolTest, UnloadIdleUnloadsEveryIdleInstanceButNotTheTakenOnes) {
  pool.give("a", fakeModule(1));
  pool.give("b", fakeModule(2));
  ASSERT_EQ(pool.take("a"), fakeModule(1));
  EXPECT_EQ(pool.unloadIdle(), 1u);
  EXPECT_EQ(unloaded, std::vector<CUmodule>{fakeModule(2)});
  EXPECT_EQ(pool.idleCount(), 0u);
  EXPECT_EQ(pool.take("b"), nullptr);
}

TEST_F(PoolTest, DestructionUnloadsWhatIsLeft) {
  std::vector<CUmodule> gone;
  {
    ModulePool local(4, [&](CUmodule m) { gone.push_back(m); });
    local.give("a", fakeModule(7));
  }
  EXPECT_EQ(gone, std::vector<CUmodule>{fakeModule(7)});
}

}  // namespace
}  // namespace tally::server::gpu
