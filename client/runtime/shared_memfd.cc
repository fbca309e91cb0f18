#include "client/runtime/shared_memfd.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tally::client {

int createSealedMemfd(size_t size, std::string& error) {
  int fd = ::memfd_create("tally-host", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    error = std::string("memfd_create: ") + std::strerror(errno);
    return -1;
  }
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    error = "ftruncate to " + std::to_string(size) + " bytes: " + std::strerror(errno);
  } else if (::fcntl(fd, F_ADD_SEALS, kSharedMemfdSeals) != 0) {
    error = std::string("sealing the shared memory file: ") + std::strerror(errno);
  } else {
    return fd;
  }
  ::close(fd);
  return -1;
}

}  // namespace tally::client
