// The NVIDIA device nodes, as a framework's presence check sees them. Some frameworks look for
// /dev/nvidia0, /dev/nvidiactl or /dev/dxg before they load the CUDA driver at all (JAX skips
// its CUDA backend without a word when none exists), and a client container has none: the
// client is its driver. So stat() of /dev/nvidiactl, when the node is absent, answers as the
// real control node would (a character device, 195:255). Nothing is created, and opening the
// path still fails with ENOENT: only the existence check changes. TALLY_DEVICE_NODES=0 turns
// this off.
//
// glibc 2.33 made stat and its relatives real exports (GLIBC_2.33); an application's references
// carry that version, so the client defines them under it (client/exports.map).
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace {

constexpr const char* kControlNode = "/dev/nvidiactl";

bool answersForControlNode(const char* path) {
  if (path == nullptr || std::strcmp(path, kControlNode) != 0) return false;
  static const bool enabled = [] {
    const char* v = std::getenv("TALLY_DEVICE_NODES");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

template <typename Stat>
int asControlNode(Stat* buf) {
  std::memset(buf, 0, sizeof(*buf));
  buf->st_mode = S_IFCHR | 0666;
  buf->st_rdev = makedev(195, 255);
  buf->st_nlink = 1;
  return 0;
}

template <typename Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

// Calls the C library's own `name`, and answers for the control node where it does not exist.
template <typename Stat, typename Call>
int statOrControlNode(const char* path, Stat* buf, Call&& real) {
  int saved = errno;
  int r = real();
  if (r != 0 && errno == ENOENT && answersForControlNode(path)) {
    errno = saved;
    return asControlNode(buf);
  }
  return r;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int stat(const char* path, struct stat* buf) {
  static auto* real = next<int (*)(const char*, struct stat*)>("stat");
  return statOrControlNode(path, buf, [&] { return real(path, buf); });
}

extern "C" __attribute__((visibility("default"))) int stat64(const char* path, struct stat64* buf) {
  static auto* real = next<int (*)(const char*, struct stat64*)>("stat64");
  return statOrControlNode(path, buf, [&] { return real(path, buf); });
}

extern "C" __attribute__((visibility("default"))) int fstatat(int dirfd, const char* path, struct stat* buf, int flags) {
  static auto* real = next<int (*)(int, const char*, struct stat*, int)>("fstatat");
  return statOrControlNode(path, buf, [&] { return real(dirfd, path, buf, flags); });
}

extern "C" __attribute__((visibility("default"))) int fstatat64(int dirfd, const char* path, struct stat64* buf,
                                                                int flags) {
  static auto* real = next<int (*)(int, const char*, struct stat64*, int)>("fstatat64");
  return statOrControlNode(path, buf, [&] { return real(dirfd, path, buf, flags); });
}
