#include "client/transport/host_memory.h"

#include <pthread.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <vector>

namespace tally::client::host_memory {

namespace {

constexpr size_t kPage = 4096;  // probing at 4 KiB also covers huge pages

// process_vm_* name the process by pid; getpid() is a system call of its own in glibc, paid on
// every small copy. Refreshed in a forked child.
pid_t cachedPid = 0;

pid_t self() {
  static const bool registered = [] {
    cachedPid = ::getpid();
    return ::pthread_atfork(nullptr, nullptr, [] { cachedPid = ::getpid(); }) == 0;
  }();
  (void)registered;
  return cachedPid;
}

// Walks the probe addresses (one byte at the start of each row and at each page boundary
// inside it) in batches of IOV_MAX, so a range of any size needs no more than one batch.
class ProbeCursor {
 public:
  explicit ProbeCursor(const Rows& rows) : rows_(rows) { startRow(); }
  // Fills `batch` with up to IOV_MAX probe bytes; false when none are left.
  bool next(std::vector<iovec>& batch) {
    batch.clear();
    while (row_ < rows_.height && batch.size() < IOV_MAX) {
      batch.push_back({reinterpret_cast<void*>(at_), 1});
      uintptr_t nextPage = (at_ | (kPage - 1)) + 1;
      if (nextPage != 0 && nextPage <= last_) {
        at_ = nextPage;
      } else {
        ++row_;
        startRow();
      }
    }
    return !batch.empty();
  }

 private:
  void startRow() {
    if (row_ >= rows_.height) return;
    at_ = reinterpret_cast<uintptr_t>(rows_.base) + row_ * rows_.pitch;
    last_ = at_ + (rows_.width - 1);
  }
  Rows rows_;
  size_t row_ = 0;
  uintptr_t at_ = 0;
  uintptr_t last_ = 0;
};

// Rows that wrap around the address space cannot be the application's memory.
bool wraps(const Rows& rows) {
  auto base = reinterpret_cast<uintptr_t>(rows.base);
  if (rows.height > 1 && rows.pitch > (UINTPTR_MAX - base) / (rows.height - 1)) return true;
  return UINTPTR_MAX - base - rows.pitch * (rows.height - 1) < rows.width - 1;
}

// The kernel refused to run the probe at all (seccomp, an old kernel): we cannot tell.
bool probeUnavailable(int error) { return error == ENOSYS || error == EPERM; }

enum class Probe { kOk, kFault, kUnavailable };

// Reads (and, when `writeBack`, rewrites) every probe byte.
Probe runProbes(const Rows& rows, bool writeBack) {
  if (rows.width == 0 || rows.height == 0) return Probe::kOk;
  if (wraps(rows)) return Probe::kFault;
  const pid_t pid = self();
  // Kept per thread: a small copy's probe should not cost two allocations.
  thread_local std::vector<char> values(IOV_MAX);
  thread_local std::vector<iovec> batch;
  for (ProbeCursor cursor(rows); cursor.next(batch);) {
    iovec local{values.data(), batch.size()};
    ssize_t n = ::process_vm_readv(pid, &local, 1, batch.data(), batch.size(), 0);
    if (n < 0 && probeUnavailable(errno)) return Probe::kUnavailable;
    if (n != static_cast<ssize_t>(batch.size())) return Probe::kFault;
    if (!writeBack) continue;
    n = ::process_vm_writev(pid, &local, 1, batch.data(), batch.size(), 0);
    if (n < 0 && probeUnavailable(errno)) return Probe::kUnavailable;
    if (n != static_cast<ssize_t>(batch.size())) return Probe::kFault;
  }
  return Probe::kOk;
}

}  // namespace

bool readable(const Rows& rows) { return runProbes(rows, false) != Probe::kFault; }

bool writable(const Rows& rows) { return runProbes(rows, true) != Probe::kFault; }

namespace {

std::atomic<uint64_t> kernelCopies{0};

// Pages a small copy went through without a fault, so that the next small copy to them is a
// plain memcpy rather than a system call (about 1 µs of a 4-byte cudaMemcpy's round trip). A
// remembered page the application unmaps or protects later faults in memcpy, as the same copy
// does natively (the driver moves pageable bytes with the CPU); pages not seen yet go through
// the kernel, so a bad pointer the application never used still gets an error code.
class KnownPages {
 public:
  static constexpr size_t kMaxBytes = 64u << 10;  // larger copies cost far more than the call

  bool cover(const char* p, size_t size) const {
    if (size == 0 || size > kMaxBytes) return false;
    for (uintptr_t page = first(p); page <= last(p, size); ++page) {
      if (slots_[slot(page)].load(std::memory_order_relaxed) != page) return false;
    }
    return true;
  }
  void remember(const char* p, size_t size) {
    if (size == 0 || size > kMaxBytes) return;
    for (uintptr_t page = first(p); page <= last(p, size); ++page) {
      slots_[slot(page)].store(page, std::memory_order_relaxed);
    }
  }

 private:
  static constexpr size_t kSlots = 1024;
  static uintptr_t first(const char* p) { return reinterpret_cast<uintptr_t>(p) / kPage; }
  static uintptr_t last(const char* p, size_t size) { return (reinterpret_cast<uintptr_t>(p) + size - 1) / kPage; }
  static size_t slot(uintptr_t page) { return (page ^ (page >> 10)) % kSlots; }
  std::array<std::atomic<uintptr_t>, kSlots> slots_{};  // page numbers; 0 (the null page) is empty
};

KnownPages writtenPages;
KnownPages readPages;

// memcpy through the kernel: the side named `remote` may be the application's memory, and a
// fault there is an error, not a signal. Costs about what memcpy does.
bool kernelCopy(char* dst, const char* src, size_t size, bool remoteIsDestination) {
  kernelCopies.fetch_add(1, std::memory_order_relaxed);
  const pid_t pid = self();
  size_t done = 0;
  while (done < size) {
    iovec to{dst + done, size - done};
    iovec from{const_cast<char*>(src) + done, size - done};
    ssize_t n = remoteIsDestination ? ::process_vm_writev(pid, &from, 1, &to, 1, 0)
                                    : ::process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (n < 0 && probeUnavailable(errno)) {
      std::memcpy(dst + done, src + done, size - done);
      return true;
    }
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

bool copyOut(void* dst, const void* src, size_t size) {
  auto* to = static_cast<char*>(dst);
  if (writtenPages.cover(to, size)) {
    std::memcpy(to, src, size);
    return true;
  }
  if (!kernelCopy(to, static_cast<const char*>(src), size, true)) return false;
  writtenPages.remember(to, size);
  return true;
}

bool copyIn(void* dst, const void* src, size_t size) {
  const auto* from = static_cast<const char*>(src);
  if (readPages.cover(from, size)) {
    std::memcpy(dst, from, size);
    return true;
  }
  if (!kernelCopy(static_cast<char*>(dst), from, size, false)) return false;
  readPages.remember(from, size);
  return true;
}

uint64_t kernelCopiesSoFar() { return kernelCopies.load(std::memory_order_relaxed); }

}  // namespace tally::client::host_memory
