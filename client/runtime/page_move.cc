#include "client/runtime/page_move.h"

#include "client/runtime/shared_memfd.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tally::client::page_move {

namespace {

size_t pageSize() {
  static const size_t size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

struct MapsLine {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  std::string perms;
  std::string path;  // empty for anonymous memory
};

bool parseLine(std::string_view text, MapsLine& out) {
  std::string line(text);
  unsigned long long begin = 0, end = 0, offset = 0, inode = 0;
  char perms[8] = {};
  char dev[16] = {};
  int pathAt = 0;
  if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %15s %llu %n", &begin, &end, perms, &offset, dev, &inode, &pathAt) < 6) {
    return false;
  }
  out.begin = static_cast<uintptr_t>(begin);
  out.end = static_cast<uintptr_t>(end);
  out.perms = perms;
  out.path = pathAt > 0 && static_cast<size_t>(pathAt) <= line.size() ? line.substr(static_cast<size_t>(pathAt)) : "";
  while (!out.path.empty() && (out.path.back() == '\n' || out.path.back() == ' ')) out.path.pop_back();
  return true;
}

// Calls `visit` for each mapping that overlaps [begin, end), in address order; false when some
// byte of the range is in no mapping (or `visit` says false).
template <typename Visit>
bool coverRange(std::string_view maps, uintptr_t begin, uintptr_t end, Visit visit) {
  uintptr_t covered = begin;
  size_t at = 0;
  while (at < maps.size() && covered < end) {
    size_t eol = maps.find('\n', at);
    if (eol == std::string_view::npos) eol = maps.size();
    MapsLine line;
    if (parseLine(maps.substr(at, eol - at), line) && line.end > covered && line.begin < end) {
      if (line.begin > covered) return false;  // a hole
      if (!visit(line)) return false;
      covered = line.end;
    }
    at = eol + 1;
  }
  return covered >= end;
}

std::string hex(uintptr_t v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(v));
  return buffer;
}

}  // namespace

PageRange pagesOf(const void* address, size_t size) {
  auto a = reinterpret_cast<uintptr_t>(address);
  uintptr_t page = pageSize();
  return PageRange{a & ~(page - 1), (a + size + page - 1) & ~(page - 1)};
}

std::string selfMaps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string movableProblem(std::string_view maps, uintptr_t begin, uintptr_t end) {
  std::string problem;
  bool covered = coverRange(maps, begin, end, [&](const MapsLine& line) {
    bool anonymous = line.path.empty() || line.path == "[heap]";
    if (!anonymous) {
      problem = "it lies in the mapping of " + line.path + " (" + hex(line.begin) + "-" + hex(line.end) +
                "): only private anonymous memory can be moved";
      return false;
    }
    if (line.perms.size() < 4 || line.perms[0] != 'r' || line.perms[1] != 'w' || line.perms[3] != 'p') {
      problem = "it lies in a mapping with permissions " + line.perms + " (" + hex(line.begin) + "-" + hex(line.end) +
                "): only private read-write memory can be moved";
      return false;
    }
    return true;
  });
  if (!covered && problem.empty()) problem = "part of it is not mapped";
  return problem;
}

bool isSharedMemfdMapping(std::string_view maps, uintptr_t begin, uintptr_t end) {
  return coverRange(maps, begin, end, [](const MapsLine& line) {
    return line.path.rfind("/memfd:tally-host", 0) == 0 && line.perms.size() >= 4 && line.perms[3] == 's';
  });
}

int moveToMemfd(PageRange range, std::string& error) {
  int fd = createSealedMemfd(range.size(), error);
  if (fd < 0) return -1;
  void* staging = ::mmap(nullptr, range.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    error = std::string("mmap of the shared file: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  std::memcpy(staging, reinterpret_cast<const void*>(range.begin), range.size());
  // MAP_FIXED replaces the old pages in one step: no instant where the range is unmapped.
  void* moved = ::mmap(reinterpret_cast<void*>(range.begin), range.size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       fd, 0);
  ::munmap(staging, range.size());
  if (moved == MAP_FAILED) {
    error = std::string("mmap of the shared file over the pages: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  return fd;
}

bool moveToAnonymous(PageRange range, std::string& error) {
  void* fresh = ::mmap(nullptr, range.size(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh == MAP_FAILED) {
    error = std::string("mmap of anonymous memory: ") + std::strerror(errno);
    return false;
  }
  std::memcpy(fresh, reinterpret_cast<const void*>(range.begin), range.size());
  // mremap onto the range replaces the shared pages in one step, like MAP_FIXED.
  void* moved = ::mremap(fresh, range.size(), range.size(), MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(range.begin));
  if (moved == MAP_FAILED) {
    error = std::string("mremap over the pages: ") + std::strerror(errno);
    ::munmap(fresh, range.size());
    return false;
  }
  return true;
}

}  // namespace tally::client::page_move
