// cuDNN size queries answered from the client's cache (client/library/answer_cache.h): keyed by
// what the descriptors hold, never by their ids, and asked again once a descriptor changes. The
// fake tallyd gives every library round trip a different answer, so an answer equal to an
// earlier one came from the cache.
#include "client/library/answer_cache.h"
#include "fake_tallyd.h"

#include <cudnn.h>
#include <gtest/gtest.h>

#include <vector>

namespace {

using tally::client::library::AnswerCache;
using tally::client::library::NamedDescriptor;

[[maybe_unused]] auto* const server = &tally::testing::processFakeTallyd();

class SizeQueries : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudnnCreate(&handle_), CUDNN_STATUS_SUCCESS); }
  void TearDown() override {
    for (cudnnTensorDescriptor_t d : tensors_) cudnnDestroyTensorDescriptor(d);
    cudnnDestroy(handle_);
  }
  cudnnTensorDescriptor_t tensor(std::vector<int> dims) {
    cudnnTensorDescriptor_t d = nullptr;
    EXPECT_EQ(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
    std::vector<int> strides(dims.size(), 1);
    for (size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
    EXPECT_EQ(cudnnSetTensorNdDescriptor(d, CUDNN_DATA_FLOAT, static_cast<int>(dims.size()), dims.data(),
                                         strides.data()),
              CUDNN_STATUS_SUCCESS);
    tensors_.push_back(d);
    return d;
  }
  size_t reserveSize(cudnnTensorDescriptor_t x) {
    size_t size = 0;
    EXPECT_EQ(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle_, CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
                                                                   CUDNN_BATCHNORM_OPS_BN, nullptr, x, &size),
              CUDNN_STATUS_SUCCESS);
    return size;
  }
  cudnnHandle_t handle_ = nullptr;
  std::vector<cudnnTensorDescriptor_t> tensors_;
};

TEST_F(SizeQueries, AFreshDescriptorHoldingTheSameIsAnsweredInTheClient) {
  size_t first = reserveSize(tensor({8, 64, 56, 56}));
  size_t again = reserveSize(tensor({8, 64, 56, 56}));  // PyTorch: a new descriptor every step
  EXPECT_NE(first, 0u);
  EXPECT_EQ(again, first);
}

TEST_F(SizeQueries, OtherContentsOrArgumentsAskTallyd) {
  size_t a = reserveSize(tensor({8, 64, 28, 28}));
  size_t b = reserveSize(tensor({8, 128, 28, 28}));
  EXPECT_NE(a, b);
  size_t c = 0;
  ASSERT_EQ(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle_, CUDNN_BATCHNORM_SPATIAL,
                                                                 CUDNN_BATCHNORM_OPS_BN, nullptr, tensor({8, 64, 28, 28}),
                                                                 &c),
            CUDNN_STATUS_SUCCESS);
  EXPECT_NE(c, a);  // another mode
}

TEST_F(SizeQueries, ADescriptorSetAgainIsAskedAgain) {
  cudnnTensorDescriptor_t x = tensor({4, 32, 14, 14});
  size_t before = reserveSize(x);
  int dims[] = {4, 32, 7, 7}, strides[] = {32 * 49, 49, 7, 1};
  ASSERT_EQ(cudnnSetTensorNdDescriptor(x, CUDNN_DATA_FLOAT, 4, dims, strides), CUDNN_STATUS_SUCCESS);
  EXPECT_NE(reserveSize(x), before);
}

TEST_F(SizeQueries, ADerivedDescriptorCarriesWhatItWasDerivedFrom) {
  auto derivedAnswer = [&](std::vector<int> dims) {
    cudnnTensorDescriptor_t bn = nullptr;
    EXPECT_EQ(cudnnCreateTensorDescriptor(&bn), CUDNN_STATUS_SUCCESS);
    tensors_.push_back(bn);
    EXPECT_EQ(cudnnDeriveBNTensorDescriptor(bn, tensor(dims), CUDNN_BATCHNORM_SPATIAL), CUDNN_STATUS_SUCCESS);
    return reserveSize(bn);
  };
  size_t a = derivedAnswer({2, 16, 9, 9});
  EXPECT_EQ(derivedAnswer({2, 16, 9, 9}), a);
  EXPECT_NE(derivedAnswer({2, 32, 9, 9}), a);
}

TEST(AnswerCacheKeys, DescriptorsCountByContentsNotIds) {
  AnswerCache& cache = AnswerCache::get();
  const std::string set = "set-args";
  cache.noteSet(901, 7, set, {});
  cache.noteSet(902, 7, set, {});
  cache.noteSet(903, 7, "other", {});
  const std::string args(16, '\0');
  NamedDescriptor a{901, 0}, b{902, 0}, c{903, 0};
  EXPECT_EQ(cache.key(1, args, std::span(&a, 1)), cache.key(1, args, std::span(&b, 1)));
  EXPECT_NE(cache.key(1, args, std::span(&a, 1)), cache.key(1, args, std::span(&c, 1)));
  EXPECT_NE(cache.key(1, args, std::span(&a, 1)), cache.key(2, args, std::span(&a, 1)));
}

TEST(AnswerCacheKeys, ContentsPastTheBoundAreNotTracked) {
  AnswerCache& cache = AnswerCache::get();
  const std::string big(AnswerCache::kMaxContentBytes, 'x');
  cache.noteSet(911, 7, big, {});
  NamedDescriptor d{911, 0};
  EXPECT_FALSE(cache.key(1, "", std::span(&d, 1)).has_value());
  cache.forget(911);
  EXPECT_TRUE(cache.key(1, "", std::span(&d, 1)).has_value());
}

TEST(AnswerCacheKeys, IdsAreZeroedWhereTheyLie) {
  std::string args = "AAAAAAAA12345678BB";
  NamedDescriptor d{0x3837363534333231ull, 8};
  EXPECT_EQ(tally::client::library::withoutIds(args, std::span(&d, 1)), std::string("AAAAAAAA") + std::string(8, '\0') + "BB");
}

}  // namespace
