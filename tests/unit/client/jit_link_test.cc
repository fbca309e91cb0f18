// Driver JIT linking in the client (client/api/jit_link.cc), against the fake tallyd: value
// options travel, log buffers and output slots are filled from the replies (also logs written
// after cuLinkCreate, and the error log of a failing input), the linked image stays valid until
// cuLinkDestroy, and bad arguments are refused without a message.
#include "fake_tallyd.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unistd.h>

namespace {

using tally::testing::FakeTallyd;
namespace wire = tally::wire;

[[maybe_unused]] auto* const server = &tally::testing::processFakeTallyd();

class JitLink : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cuInit(0), CUDA_SUCCESS); }
};

void* asValue(uintptr_t v) { return reinterpret_cast<void*>(v); }

TEST_F(JitLink, OptionsTravelAndOutputsAreFilled) {
  char info[64], error[64];
  CUjit_option options[] = {CU_JIT_WALL_TIME, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE,
                            CU_JIT_OPTIMIZATION_LEVEL};
  void* values[] = {nullptr, info, asValue(sizeof info), error, asValue(8), asValue(1), asValue(3)};
  CUlinkState link = nullptr;
  ASSERT_EQ(cuLinkCreate(7, options, values, &link), CUDA_SUCCESS);
  FakeTallyd::LinkCreated sent = server->lastLinkCreate();
  ASSERT_EQ(sent.options.size(), 2u);
  EXPECT_EQ(sent.options[0], std::make_pair(uint32_t{CU_JIT_LOG_VERBOSE}, uint64_t{1}));
  EXPECT_EQ(sent.options[1], std::make_pair(uint32_t{CU_JIT_OPTIMIZATION_LEVEL}, uint64_t{3}));
  EXPECT_EQ(sent.infoLogBytes, sizeof info);
  EXPECT_EQ(sent.errorLogBytes, 8u);
  EXPECT_TRUE(sent.wallTime);

  char ptx[] = ".version 8.0\n";
  ASSERT_EQ(cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx, sizeof ptx, "in.ptx", 0, nullptr, nullptr), CUDA_SUCCESS);
  void* cubin = nullptr;
  size_t size = 0;
  ASSERT_EQ(cuLinkComplete(link, &cubin, &size), CUDA_SUCCESS);
  ASSERT_EQ(size, sizeof tally::testing::kFakeLinkedImage);
  EXPECT_STREQ(static_cast<const char*>(cubin), tally::testing::kFakeLinkedImage);
  EXPECT_STREQ(info, tally::testing::kFakeInfoLog);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[2]), std::strlen(tally::testing::kFakeInfoLog) + 1);
  EXPECT_STREQ(error, "fake er");  // truncated to its 8 bytes
  float wall = 0;
  std::memcpy(&wall, &values[0], sizeof wall);
  EXPECT_EQ(wall, 1.5f);
  ASSERT_EQ(cuLinkDestroy(link), CUDA_SUCCESS);
  EXPECT_EQ(cuLinkDestroy(link), CUDA_ERROR_INVALID_HANDLE);
}

// The driver writes its logs when it links, not when the link is created: the first reply
// carries no text, and what later replies carry must still reach the application's buffers at
// the sizes cuLinkCreate was given (as ptxjit and tests/gpu/jit_link.cu read them).
TEST_F(JitLink, LogsWrittenAfterCreateReachTheApplicationsBuffers) {
  char info[64] = "untouched", error[64] = "untouched";
  CUjit_option options[] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
  void* values[] = {info, asValue(sizeof info), error, asValue(sizeof error), asValue(1)};
  CUlinkState link = nullptr;
  ASSERT_EQ(cuLinkCreate(5, options, values, &link), CUDA_SUCCESS);
  EXPECT_STREQ(info, "");  // the driver's (tallyd's) buffer, empty so far
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[1]), sizeof info);  // nothing filled: the size stays

  char broken[] = "not ptx";
  EXPECT_EQ(cuLinkAddData(link, CU_JIT_INPUT_PTX, broken, sizeof broken, tally::testing::kFakeBrokenInput, 0, nullptr,
                          nullptr),
            CUDA_ERROR_INVALID_PTX);
  EXPECT_STREQ(error, tally::testing::kFakeErrorLog);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[3]), std::strlen(tally::testing::kFakeErrorLog) + 1);

  char ptx[] = ".version 8.0\n";
  ASSERT_EQ(cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx, sizeof ptx, "in.ptx", 0, nullptr, nullptr), CUDA_SUCCESS);
  void* cubin = nullptr;
  size_t size = 0;
  ASSERT_EQ(cuLinkComplete(link, &cubin, &size), CUDA_SUCCESS);
  EXPECT_STREQ(info, tally::testing::kFakeInfoLog);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values[1]), std::strlen(tally::testing::kFakeInfoLog) + 1);
  ASSERT_EQ(cuLinkDestroy(link), CUDA_SUCCESS);
}

TEST_F(JitLink, AFileIsReadByTheClientAndSentAsData) {
  CUlinkState link = nullptr;
  ASSERT_EQ(cuLinkCreate(0, nullptr, nullptr, &link), CUDA_SUCCESS);
  char path[] = "/tmp/tally-jit-link-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "ptx", 3), 3);
  ::close(fd);
  uint64_t before = server->callsOf(wire::Call::LINK_ADD_DATA);
  EXPECT_EQ(cuLinkAddFile(link, CU_JIT_INPUT_PTX, path, 0, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(server->callsOf(wire::Call::LINK_ADD_DATA), before + 1);
  ::unlink(path);
  EXPECT_EQ(cuLinkAddFile(link, CU_JIT_INPUT_PTX, path, 0, nullptr, nullptr), CUDA_ERROR_FILE_NOT_FOUND);
  ASSERT_EQ(cuLinkDestroy(link), CUDA_SUCCESS);
}

TEST_F(JitLink, BadArgumentsSendNothing) {
  uint64_t before = server->calls();
  CUlinkState link = nullptr;
  EXPECT_EQ(cuLinkCreate(0, nullptr, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLinkCreate(1, nullptr, nullptr, &link), CUDA_ERROR_INVALID_VALUE);
  CUjit_option sizeOnly[] = {CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* sizeValue[] = {asValue(64)};
  EXPECT_EQ(cuLinkCreate(1, sizeOnly, sizeValue, &link), CUDA_ERROR_INVALID_VALUE);  // no buffer to fill
  CUjit_option symbols[] = {CU_JIT_GLOBAL_SYMBOL_COUNT};
  void* symbolValue[] = {asValue(1)};
  EXPECT_EQ(cuLinkCreate(1, symbols, symbolValue, &link), CUDA_ERROR_NOT_SUPPORTED);
  int notALink = 0;
  void* cubin = nullptr;
  size_t size = 0;
  char ptx[] = "x";
  EXPECT_EQ(cuLinkAddData(reinterpret_cast<CUlinkState>(&notALink), CU_JIT_INPUT_PTX, ptx, 2, "", 0, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLinkComplete(reinterpret_cast<CUlinkState>(&notALink), &cubin, &size), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuLinkDestroy(nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(server->calls(), before);

  ASSERT_EQ(cuLinkCreate(0, nullptr, nullptr, &link), CUDA_SUCCESS);
  before = server->calls();
  EXPECT_EQ(cuLinkAddData(link, CU_JIT_INPUT_PTX, nullptr, 2, "", 0, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLinkAddData(link, static_cast<CUjitInputType>(99), ptx, 2, "", 0, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLinkComplete(link, nullptr, &size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(server->calls(), before);
  ASSERT_EQ(cuLinkDestroy(link), CUDA_SUCCESS);
}

}  // namespace
