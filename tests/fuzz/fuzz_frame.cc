// libFuzzer entry point (clang, TALLY_BUILD_FUZZERS=ON): bytes → frames → ClientMessages.
#include "tests/fuzz/frame_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tally::fuzz::consumeBytes(data, size);
  return 0;
}
