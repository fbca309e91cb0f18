#include "server/transport/unix_socket_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tally::server::transport {
namespace {

std::string parentOf(const std::string& path) {
  std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

bool addressOf(const std::string& path, sockaddr_un& addr, std::string& error) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    error = fmt::format("socket path '{}' must have 1 to {} characters", path, sizeof(addr.sun_path) - 1);
    return false;
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return true;
}

// True when a server accepts connections at `path` (or its backlog is full).
bool someoneListens(const std::string& path) {
  sockaddr_un addr;
  std::string ignored;
  if (!addressOf(path, addr, ignored)) return false;
  int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (probe < 0) return false;
  bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 || errno == EAGAIN;
  ::close(probe);
  return live;
}

// Gives the socket file exactly `mode` (the umask may have taken bits at bind). The file is
// opened with O_NOFOLLOW and checked to be a socket, so a symlink planted at `path` is never
// followed to another file.
std::string setSocketMode(const std::string& path, unsigned mode) {
  int file = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (file < 0) return fmt::format("cannot open {} to set its mode: {}", path, std::strerror(errno));
  struct stat st {};
  std::string error;
  if (::fstat(file, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    error = fmt::format("{} is no longer the socket tallyd bound: not changing its mode", path);
  } else if ((st.st_mode & 07777) != mode &&
             ::chmod(fmt::format("/proc/self/fd/{}", file).c_str(), static_cast<mode_t>(mode)) != 0) {
    error = fmt::format("cannot set mode {:04o} on {}: {}", mode, path, std::strerror(errno));
  }
  ::close(file);
  return error;
}

}  // namespace

std::string checkSocketDirectory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return fmt::format("socket directory {}: {}", dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("socket directory {} is not a directory", dir);
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return fmt::format("socket directory {} is owned by uid {}, neither tallyd's uid {} nor root: its owner could "
                       "replace the socket",
                       dir, st.st_uid, ::geteuid());
  }
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return fmt::format("socket directory {} (mode {:04o}) is writable by every user and has no sticky bit: anyone "
                       "could replace the socket",
                       dir, st.st_mode & 07777);
  }
  return {};
}

std::string removeStaleSocket(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? std::string() : fmt::format("cannot examine {}: {}", path, std::strerror(errno));
  }
  if (!S_ISSOCK(st.st_mode)) return fmt::format("{} exists and is not a socket: not removing it", path);
  if (someoneListens(path)) return fmt::format("{} is in use: another server listens on it", path);
  if (::unlink(path.c_str()) != 0) return fmt::format("cannot remove the stale socket {}: {}", path, std::strerror(errno));
  return {};
}

int bindUnixSocket(const std::string& path, unsigned mode, std::string& error) {
  sockaddr_un addr;
  if (!addressOf(path, addr, error)) return -1;
  std::string dir = parentOf(path);
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);  // checked below, whoever made it
  if (!(error = checkSocketDirectory(dir)).empty() || !(error = removeStaleSocket(path)).empty()) return -1;
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = fmt::format("socket for {}: {}", path, std::strerror(errno));
    return -1;
  }
  // bind creates the file with the socket's own mode less the umask: never more open than
  // `mode`, not even before the mode is set.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    error = fmt::format("cannot bind {}: {}", path, std::strerror(errno));
    ::close(fd);
    return -1;
  }
  if (!(error = setSocketMode(path, mode)).empty()) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void removeSocketFile(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
}

}  // namespace tally::server::transport
