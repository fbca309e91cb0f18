// Run-time binding of tallyd to cuBLAS, cuBLASLt, cuDNN and cuFFT. Like the driver (gpu/driver_loader.h)
// they are opened with dlopen on first use, not linked: tallyd starts on a host without them and
// answers their calls with the library's NOT_INITIALIZED status, logging once why.
// Searched by soname (LD_LIBRARY_PATH, the ld.so cache), or in `library_dir` of the config.
#pragma once

#include <cstddef>
#include <string>

namespace tally::server::library {

enum class Library { kCublas, kCublasLt, kCudnn, kCufft };
inline constexpr size_t kLibraries = 4;

const char* sonameOf(Library lib);
// Where to look first (tallyd's config `library_dir`); empty: the loader's search path only.
void setLibraryDirectory(std::string dir);
// Address of `name` in `lib`, or nullptr (library missing: logged once).
void* librarySymbol(Library lib, const char* name);

template <typename Fn>
Fn resolve(Library lib, const char* name) {
  return reinterpret_cast<Fn>(librarySymbol(lib, name));
}

}  // namespace tally::server::library
