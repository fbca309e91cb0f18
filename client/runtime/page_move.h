// Moving the application's pages into memory shared with tallyd, at the same addresses
// (cudaHostRegister over a Unix socket): the pages' current contents are copied into a sealed
// memfd, which is then mapped MAP_FIXED | MAP_SHARED over the range, so pointers the
// application holds stay valid and tallyd (which maps the same file) DMAs from and to them.
// Only private anonymous read-write memory (malloc, new, mmap(MAP_ANONYMOUS), the brk heap) is
// moved: a file-backed, shared or special mapping (stack, vdso, device memory) keeps its
// semantics only where it is, so those are refused with the reason.
//
// What moving changes for the application: the pages are MAP_SHARED, so a child forked while
// they are registered shares them instead of getting a copy; bytes written by another thread
// into the moved pages while they are being copied (between the copy and the remap) are lost,
// which is why the application must not write the range while it registers it (natively it
// may: the driver only pins the pages). Unregistering moves them back into private anonymous
// memory the same way (moveToAnonymous).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tally::client::page_move {

// The first page and the end of the last page of [address, address + size).
struct PageRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  size_t size() const { return end - begin; }
};
PageRange pagesOf(const void* address, size_t size);

// The text of /proc/self/maps (empty if it cannot be read).
std::string selfMaps();

// Why [begin, end) cannot be moved, given the text of /proc/self/maps; empty when every byte of
// it lies in private anonymous read-write mappings.
std::string movableProblem(std::string_view maps, uintptr_t begin, uintptr_t end);

// Whether [begin, end) is still wholly mapped from the client's shared memfds (moveToMemfd's
// files, named "tally-host"), shared: not unmapped or replaced since it was moved.
bool isSharedMemfdMapping(std::string_view maps, uintptr_t begin, uintptr_t end);

// Moves the pages [range.begin, range.end) into a new sealed memfd mapped at the same
// addresses; returns the file's descriptor (the caller closes it), or -1 with `error` and the
// pages untouched.
int moveToMemfd(PageRange range, std::string& error);

// Moves the pages back into private anonymous memory at the same addresses, contents kept;
// false with `error` and the pages untouched when it cannot.
bool moveToAnonymous(PageRange range, std::string& error);

}  // namespace tally::client::page_move
