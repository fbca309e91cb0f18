// Whether the application's host memory can be read or written, learned without risking a
// signal: the kernel copies through process_vm_readv/process_vm_writev on our own pid and
// answers EFAULT (or a short count) where a plain access would raise SIGSEGV.
//
// Why this and not a pipe: a pipe copies every byte (and holds at most 64 KiB at a time); here
// one byte per page is enough, in one syscall per IOV_MAX (1024) pages, so checking a 4 GiB
// buffer costs ~1000 syscalls and no copy of the data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tally::client::host_memory {

// `height` rows of `width` bytes, `pitch` bytes apart (a flat range: height 1). The gaps
// between rows are not the application's business and are not probed.
struct Rows {
  const void* base = nullptr;
  size_t width = 0;
  size_t pitch = 0;
  size_t height = 1;
};

// True when every byte of the rows can be read (source of a host-to-device copy). Where the
// kernel refuses the probe itself (seccomp), it cannot tell and says true: the transport then
// still survives a fault (connection.cc).
bool readable(const Rows& rows);
// True when every byte can be written (destination of a device-to-host copy). The probe reads
// one byte per page and writes the same byte back; the copy overwrites the range anyway.
bool writable(const Rows& rows);

inline bool readable(const void* p, size_t size) { return readable(Rows{p, size, size, 1}); }
inline bool writable(void* p, size_t size) { return writable(Rows{p, size, size, 1}); }

// Copies `size` bytes from our `src` into the application's `dst`; false, not a signal, when
// `dst` cannot be written (the application unmapped or protected it). A small copy to pages an
// earlier copy wrote is a plain memcpy (host_memory.cc, KnownPages).
bool copyOut(void* dst, const void* src, size_t size);
// Copies `size` bytes from the application's `src` into our `dst`; false, not a signal, when
// `src` cannot be read. Small copies from pages read before: a plain memcpy.
bool copyIn(void* dst, const void* src, size_t size);
// How many copies went through the kernel so far (tests: which ones a known page spared).
uint64_t kernelCopiesSoFar();

}  // namespace tally::client::host_memory
