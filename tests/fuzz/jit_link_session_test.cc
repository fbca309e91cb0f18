// Driver JIT linking through tallyd's real handlers (server/api/jit_link_api.cc) on the fake GPU,
// whose linker concatenates its inputs (fake_gpu/fake_link.cc): inputs arrive as bulk, the
// linked image and the log text come back, link ids are each tenant's own, and a failing input
// returns its error log.
#include "tests/fuzz/graph_session_harness.h"

#include <cuda.h>

#include <string>

namespace tally {
namespace {

Answer create(Tenant& t, uint64_t link) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initLinkCreate();
    m.setLink(link);
    m.setInfoLogBytes(64);
    m.setErrorLogBytes(64);
    auto options = m.initOptions(1);
    options[0].setOption(CU_JIT_LOG_VERBOSE);
    options[0].setValue(1);
  });
}

Answer add(Tenant& t, uint64_t link, const std::string& bytes) {
  return t.call([&](wire::Call::Builder c) {
    auto m = c.initLinkAddData();
    m.setLink(link);
    m.setInputType(CU_JIT_INPUT_PTX);
    m.setName("input.ptx");
    m.setSize(bytes.size());
  }, bytes);
}

Answer complete(Tenant& t, uint64_t link) {
  return t.call([&](wire::Call::Builder c) { c.initLinkComplete().setLink(link); });
}

TEST(JitLinkSession, InputsAreLinkedAndTheImageAndLogComeBack) {
  Tenant t(server());
  ASSERT_EQ(create(t, 7).status, CUDA_SUCCESS);
  ASSERT_EQ(add(t, 7, "first;").status, CUDA_SUCCESS);
  ASSERT_EQ(add(t, 7, "second").status, CUDA_SUCCESS);
  Answer done = complete(t, 7);
  ASSERT_EQ(done.status, CUDA_SUCCESS);
  EXPECT_EQ(done.linkImage, "first;second");
  // The fake driver starts its buffer over at each step; the tenant still sees the whole log.
  EXPECT_EQ(done.linkInfoLog, "6 bytes compiled;12 bytes compiled;fake link: 12 bytes");
  t.post([](wire::Call::Builder c) { c.initLinkDestroy().setLink(7); });
  EXPECT_EQ(complete(t, 7).status, CUDA_ERROR_INVALID_HANDLE);
}

TEST(JitLinkSession, LinkIdsAreTheTenantsOwnAndOptionsAreChecked) {
  Tenant a(server()), b(server());
  ASSERT_EQ(create(a, 9).status, CUDA_SUCCESS);
  EXPECT_EQ(create(a, 9).status, CUDA_ERROR_INVALID_VALUE);  // an id in use
  EXPECT_EQ(add(b, 9, "x").status, CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(complete(b, 9).status, CUDA_ERROR_INVALID_HANDLE);
  Answer pointerOption = b.call([](wire::Call::Builder c) {
    auto m = c.initLinkCreate();
    m.setLink(10);
    auto options = m.initOptions(1);
    options[0].setOption(CU_JIT_GLOBAL_SYMBOL_ADDRESSES);  // names memory: never forwarded
    options[0].setValue(0x1000);
  });
  EXPECT_EQ(pointerOption.status, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(complete(a, 9).status, CUDA_SUCCESS);
}

TEST(JitLinkSession, AFailingInputReturnsItsErrorLog) {
  Tenant t(server());
  ASSERT_EQ(create(t, 11).status, CUDA_SUCCESS);
  Answer failed = add(t, 11, "");
  EXPECT_EQ(failed.status, CUDA_ERROR_INVALID_PTX);
  EXPECT_EQ(failed.linkErrorLog, "empty input input.ptx");
}

}  // namespace
}  // namespace tally
