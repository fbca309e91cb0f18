// Replays the session corpus (session_corpus/) without libFuzzer, with any compiler: each file
// is one session against tallyd's handlers on the fake GPU. CI runs it as
// security.fuzz_session_replay; a handler that crashes or trips a sanitizer fails it.
//   fuzz_session_replay DIR_OR_FILE...
#include "tests/fuzz/session_harness.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

bool replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tally::fuzz::runSession(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t sessions = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path path(argv[i]);
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(path)) {
      for (const auto& entry : std::filesystem::directory_iterator(path)) files.push_back(entry.path());
    } else {
      files.push_back(path);
    }
    for (const auto& file : files) {
      ok = replay(file) && ok;
      ++sessions;
    }
  }
  std::printf("replayed %zu sessions\n", sessions);
  return ok && sessions > 0 ? 0 : 1;
}
