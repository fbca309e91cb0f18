// ModuleTable: module handles, the max_modules limit (issue 13, finding 15) and what unloading
// a module takes with it (finding 4). No GPU: the instances are never touched.
#include "server/session/module_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tally::server::session {
namespace {

FunctionState functionOf(uint64_t module) {
  FunctionState f;
  f.module = module;
  return f;
}

TEST(ModuleTable, AHandleInUseIsRefused) {
  ModuleTable table(0, "tenant 1 (test)");
  ASSERT_EQ(table.admit(5), CUDA_SUCCESS);
  table.insert(5, ModuleState{});
  EXPECT_EQ(table.admit(5), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(table.admit(6), CUDA_SUCCESS);  // 0: unlimited
}

TEST(ModuleTable, PastMaxModulesTheDriversOutOfMemoryAnswer) {
  ModuleTable table(2, "tenant 1 (test)");
  table.insert(1, ModuleState{});
  table.insert(2, ModuleState{});
  EXPECT_EQ(table.admit(3), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(table.admit(3), CUDA_ERROR_OUT_OF_MEMORY);  // still (and logged once)
  ASSERT_TRUE(table.take(1).has_value());
  EXPECT_EQ(table.admit(3), CUDA_SUCCESS);  // an unload makes room
}

TEST(ModuleTable, UnloadingAModuleTakesItsFunctionsWithIt) {
  ModuleTable table(0, "tenant 1 (test)");
  table.insert(1, ModuleState{});
  table.insert(2, ModuleState{});
  table.addFunction(10, functionOf(1));
  table.addFunction(11, functionOf(1));
  table.addFunction(20, functionOf(2));
  std::optional<ModuleState> gone = table.take(1);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(table.module(1), nullptr);
  EXPECT_EQ(table.function(10), nullptr);  // would name an instance that may be another tenant's now
  EXPECT_EQ(table.function(11), nullptr);
  ASSERT_NE(table.function(20), nullptr);  // another module's function stays
  EXPECT_EQ(table.function(20)->module, 2u);
  EXPECT_EQ(table.functionCount(), 1u);
  EXPECT_FALSE(table.take(1).has_value());  // unloading twice
}

TEST(ModuleTable, OnlyAnInstanceWithoutAPoolKeyIsUnloadedWhenDropped) {
  ModuleTable table(0, "tenant 1 (test)");
  ModuleState pooled;
  pooled.poolKey = "abc";
  table.insert(1, pooled);
  table.insert(2, ModuleState{});
  EXPECT_FALSE(table.unloadsWhenDropped(1));
  EXPECT_TRUE(table.unloadsWhenDropped(2));
  EXPECT_FALSE(table.unloadsWhenDropped(3));  // unknown
}

// cuModuleEnumerateFunctions through tallyd: a module loaded from the compiled variant module
// lists the tenant's kernels only, in the driver's order.
TEST(ModuleTable, TheVariantsOfAKernelAreNotTheTenants) {
  std::vector<std::string> loaded = {"add", "add__tally_sliced", "add__tally_ptb", "scale", "scale__tally_sliced"};
  EXPECT_EQ(tenantFunctionNames(loaded, true), (std::vector<std::string>{"add", "scale"}));
}

TEST(ModuleTable, AModuleWithoutVariantsListsEveryFunction) {
  // Names are the tenant's own when the instance is its image: nothing is filtered by name.
  std::vector<std::string> loaded = {"b", "a__tally_ptb", "a"};
  EXPECT_EQ(tenantFunctionNames(loaded, false), loaded);
  EXPECT_TRUE(tenantFunctionNames({}, true).empty());
}

}  // namespace
}  // namespace tally::server::session
