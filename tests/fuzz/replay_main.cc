// Runs every file of the fuzz corpus (and its regression seeds) through the fuzz target's
// code, so CI exercises it with any compiler: fuzz_replay DIR_OR_FILE...
// Exit status 0 when every input was consumed (a crash fails the test by itself); 1 when no
// input was found or when no seed decoded to a complete message (the corpus went stale).
#include "tests/fuzz/frame_walk.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace {

std::vector<std::filesystem::path> inputsOf(const char* argument) {
  std::vector<std::filesystem::path> files;
  std::filesystem::path path(argument);
  if (std::filesystem::is_directory(path)) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
  } else if (std::filesystem::is_regular_file(path)) {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  size_t inputs = 0, frames = 0, messages = 0;
  for (int i = 1; i < argc; ++i) {
    for (const auto& file : inputsOf(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto stats = tally::fuzz::consumeBytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      std::printf("%s: %zu bytes, %zu frames, %zu messages walked, %zu rejected\n", file.filename().c_str(),
                  bytes.size(), stats.frames, stats.messages, stats.rejected);
      ++inputs;
      frames += stats.frames;
      messages += stats.messages;
    }
  }
  std::printf("fuzz_replay: %zu inputs, %zu frames, %zu messages walked\n", inputs, frames, messages);
  if (inputs == 0 || messages == 0) {
    std::fprintf(stderr, "fuzz_replay: no input, or no input decoded to a message\n");
    return 1;
  }
  return 0;
}
