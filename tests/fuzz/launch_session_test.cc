// Launch attributes through tallyd's real handlers (server/api/launch_api.cc) on the fake GPU:
// an application's programmatic stream serialization reaches the driver only when the stream's
// previous work is one of the tenant's kernels; after anything else the kernel is ordered.
#include "tests/fuzz/graph_session_harness.h"

namespace tally {
namespace {

size_t programmaticLaunches() { return fakeDriverCount("tallyFakeProgrammaticLaunches"); }

TEST(LaunchSession, ProgrammaticSerializationOnlyRightAfterTheTenantsKernel) {
  Tenant t(server());
  const uint64_t counter = t.prepare();
  const size_t before = programmaticLaunches();

  t.launchAdd(kStream, counter, true);  // the stream's first work
  ASSERT_EQ(t.synchronize(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(programmaticLaunches(), before) << "nothing before it to overlap";

  t.launchAdd(kStream, counter, true);  // right after the tenant's kernel
  ASSERT_EQ(t.synchronize(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(programmaticLaunches(), before + 1);

  t.post([&](wire::Call::Builder c) {  // a memset between
    auto m = c.initMemset();
    m.setStream(kStream);
    m.setDst(counter);
    m.setWidth(4);
  });
  t.launchAdd(kStream, counter, true);
  ASSERT_EQ(t.synchronize(kStream).status, CUDA_SUCCESS);
  EXPECT_EQ(programmaticLaunches(), before + 1) << "a memset came between";
  EXPECT_EQ(t.read(counter), 1u) << "every launch ran, in order after the memset";
}

}  // namespace
}  // namespace tally
