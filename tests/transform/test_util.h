// Helpers shared by the transform tests: files, child processes, token comparison.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "server/transform/lexer.h"

namespace tally::server::transform::test {

inline std::string readText(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void writeText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh directory under the test temp dir, unique per process and call.
inline std::filesystem::path scratchDir(const std::string& name) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("tally_transform_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + name);
  std::filesystem::create_directories(dir);
  return dir;
}

struct CommandResult {
  int status = -1;     // exit status
  std::string output;  // stdout and stderr together
};

inline CommandResult runCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  int raw = pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return result;
}

inline std::string quote(const std::string& s) { return "'" + s + "'"; }

// Token texts of PTX (layout and comments ignored).
inline std::vector<std::string> tokenTexts(const std::string& text) {
  std::vector<std::string> out;
  for (const Token& t : lex(text).tokens) out.push_back(t.text);
  return out;
}

}  // namespace tally::server::transform::test
