// What the isolation benchmark's programs share (hp_infer, be_train, green_split): error checks,
// the device check, clocks and a strict "--name value" option parser.
#pragma once

#include <cuda_runtime.h>

#include <cerrno>  // program_invocation_short_name (glibc): messages name the program that failed
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#define CHECK(x)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, #x,              \
                   cudaGetErrorString(e_));                                                       \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

namespace isolation {

using Clock = std::chrono::steady_clock;

inline double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

[[noreturn]] inline void fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, message.c_str());
  std::exit(2);
}

// The SM count of device 0. Checks for a device first so that a host without one (or without a
// driver) gets one clear line instead of an error from whatever call happens to come first.
inline int deviceSms() {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "%s: no usable CUDA device (cudaGetDeviceCount: %s)\n", program_invocation_short_name,
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    std::exit(1);
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// "--name value" options. Every option a program reads is looked up by name; finish() rejects
// the rest, so that a misspelt option fails instead of silently running the default.
class Args {
 public:
  Args(int argc, char** argv, const char* usage) : usage_(usage) {
    for (int i = 1; i < argc; i += 2) {
      std::string name = argv[i];
      if (name.rfind("--", 0) != 0 || i + 1 >= argc) usageError();
      values_[name.substr(2)] = argv[i + 1];
    }
  }
  bool has(const std::string& name) {
    read_.insert(name);
    return values_.count(name) != 0;
  }
  std::string text(const std::string& name, const std::string& fallback) {
    return has(name) ? values_[name] : fallback;
  }
  double number(const std::string& name, double fallback) {
    if (!has(name)) return fallback;
    char* end = nullptr;
    double v = std::strtod(values_[name].c_str(), &end);
    if (end == values_[name].c_str() || *end != '\0') fail("--" + name + " needs a number, not " + values_[name]);
    return v;
  }
  void finish() const {
    for (const auto& kv : values_)
      if (!read_.count(kv.first)) usageError();
  }
  [[noreturn]] void usageError() const {
    std::fprintf(stderr, "usage: %s %s\n", program_invocation_short_name, usage_);
    std::exit(2);
  }

 private:
  const char* usage_;
  std::map<std::string, std::string> values_;
  std::set<std::string> read_;
};

}  // namespace isolation
