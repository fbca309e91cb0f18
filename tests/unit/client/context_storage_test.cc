// Context-local storage served to a CUDA runtime linked into the application
// (client/api/context_storage.cc): keyed by context and key, a null context is the current one,
// a miss is an error, and releasing a context runs its values' destructors once.
#include "client/api/context_storage.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

CUcontext currentForTest = nullptr;

}  // namespace

// The client's cuCtxGetCurrent, as the storage sees it.
extern "C" CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = currentForTest;
  return CUDA_SUCCESS;
}

namespace tally::client::context_storage {
namespace {

CUcontext context(uintptr_t n) { return reinterpret_cast<CUcontext>(n); }
void* key(uintptr_t n) { return reinterpret_cast<void*>(n); }

struct Destroyed {
  CUcontext ctx;
  void* key;
  void* value;
};
std::vector<Destroyed> destroyed;
void recordDestruction(CUcontext ctx, void* k, void* value) { destroyed.push_back({ctx, k, value}); }

TEST(ContextStorage, ValuesAreKeptPerContextAndKey) {
  ASSERT_EQ(put(context(1), key(10), key(100), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(put(context(2), key(10), key(200), nullptr), CUDA_SUCCESS);
  void* value = nullptr;
  EXPECT_EQ(get(&value, context(1), key(10)), CUDA_SUCCESS);
  EXPECT_EQ(value, key(100));
  EXPECT_EQ(get(&value, context(2), key(10)), CUDA_SUCCESS);
  EXPECT_EQ(value, key(200));
  EXPECT_NE(get(&value, context(1), key(11)), CUDA_SUCCESS) << "a miss is an error the runtime expects";
  EXPECT_EQ(put(context(1), key(10), key(101), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(get(&value, context(1), key(10)), CUDA_SUCCESS);
  EXPECT_EQ(value, key(101)) << "put replaces";
  EXPECT_EQ(remove(context(1), key(10)), CUDA_SUCCESS);
  EXPECT_NE(get(&value, context(1), key(10)), CUDA_SUCCESS);
  remove(context(2), key(10));
}

TEST(ContextStorage, NullContextIsTheCurrentOne) {
  currentForTest = context(7);
  ASSERT_EQ(put(nullptr, key(1), key(70), nullptr), CUDA_SUCCESS);
  void* value = nullptr;
  EXPECT_EQ(get(&value, context(7), key(1)), CUDA_SUCCESS);
  EXPECT_EQ(value, key(70));
  currentForTest = context(8);
  EXPECT_NE(get(&value, nullptr, key(1)), CUDA_SUCCESS) << "another context is current now";
  remove(context(7), key(1));
  currentForTest = nullptr;
}

TEST(ContextStorage, ReleasingAContextRunsItsDestructorsOnceAndForgetsItsValues) {
  destroyed.clear();
  put(context(3), key(1), key(31), recordDestruction);
  put(context(3), key(2), key(32), recordDestruction);
  put(context(4), key(1), key(41), recordDestruction);
  release(context(3));
  ASSERT_EQ(destroyed.size(), 2u);
  for (const Destroyed& d : destroyed) EXPECT_EQ(d.ctx, context(3));
  void* value = nullptr;
  EXPECT_NE(get(&value, context(3), key(1)), CUDA_SUCCESS);
  EXPECT_EQ(get(&value, context(4), key(1)), CUDA_SUCCESS) << "another context's values stay";
  release(context(3));
  EXPECT_EQ(destroyed.size(), 2u) << "nothing left to destroy";
  EXPECT_EQ(remove(context(4), key(1)), CUDA_SUCCESS);
  release(context(4));
  EXPECT_EQ(destroyed.size(), 2u) << "a removed value's destructor never runs";
}

}  // namespace
}  // namespace tally::client::context_storage
