// libFuzzer target: one input = one whole tenant session against tallyd's handlers on the
// fake GPU (session_harness.h). Built with -DTALLY_BUILD_FUZZERS=ON (CMakeLists.txt here).
#include "tests/fuzz/session_harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::fuzz::runSession(data, size);
  return 0;
}
