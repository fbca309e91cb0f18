#include "server/main/restart.h"

#include "common/trace/call_trace.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <linux/close_range.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tally::server {

namespace {
std::vector<std::string>& savedArguments() {
  static std::vector<std::string> arguments;
  return arguments;
}
}  // namespace

void rememberCommandLine(int argc, char** argv) {
  savedArguments().assign(argv, argv + argc);
}

void startOver(const std::string& faultHistory) {
  ::setenv(kFaultHistoryVariable, faultHistory.c_str(), 1);
  std::vector<char*> argv;
  for (std::string& a : savedArguments()) argv.push_back(a.data());
  argv.push_back(nullptr);
  spdlog::warn("tallyd starts over (exec of /proc/self/exe) to get a fresh CUDA context");
  spdlog::default_logger()->flush();
  // Sockets, the driver's device files, pipes: none may outlive this image (stdin/out/err stay).
  ::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
  trace::flushCallTrace();  // exec skips atexit handlers
  ::execv("/proc/self/exe", argv.data());
  spdlog::critical("cannot start over: exec of /proc/self/exe failed: {}", std::strerror(errno));
}

std::string takeFaultHistory() {
  const char* text = std::getenv(kFaultHistoryVariable);
  std::string history = text != nullptr ? text : "";
  ::unsetenv(kFaultHistoryVariable);
  return history;
}

}  // namespace tally::server
