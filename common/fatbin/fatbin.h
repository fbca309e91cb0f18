// Parser for CUDA module images: fat binaries (wrapper and container), ELF cubins and PTX.
//
// The client library uses it on pointers handed to it by the CUDA application (trusted memory:
// containerFromWrapper, moduleImage, elfImageSize) to find out how many bytes to ship; tallyd
// uses the bounds-checked functions (parseContainer(s), findElfSection) on bytes received from
// clients, which are untrusted: those never read outside the span and never throw.
//
// Layouts below were verified against CUDA 13.0 (nvcc V13.0.88) output with hexdumps of
// `nvcc -fatbin`, `nvcc -c` objects and linked executables; see fatbin.cc for details.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tally::fatbin {

// __fatBinC_Wrapper_t::magic, what __cudaRegisterFatBinary receives.
inline constexpr uint32_t kWrapperMagic = 0x466243b1;
// Magic of a fatbin container (the `data` a wrapper points at; the .nv_fatbin section contents).
inline constexpr uint32_t kContainerMagic = 0xBA55ED50;
// Upper bound on one decompressed payload; protects tallyd from size fields that ask for
// absurd allocations. Real cubins are far below this.
inline constexpr size_t kMaxDecompressedBytes = size_t{1} << 30;

// Entry header flags (Entry::flags). Meaning verified with nvcc 13.0 unless marked otherwise.
inline constexpr uint64_t kFlag64Bit = 0x1;
inline constexpr uint64_t kFlagDebug = 0x2;            // -G
inline constexpr uint64_t kFlagLinux = 0x10;
inline constexpr uint64_t kFlagLz4 = 0x2000;           // raw LZ4 block (-compress-mode=speed)
inline constexpr uint64_t kFlagZstd = 0x8000;          // Zstd frame(s) (default / size)
inline constexpr uint64_t kFlagArchSpecific = 0x100000;    // sm_90a / compute_90a ...
inline constexpr uint64_t kFlagFamilySpecific = 0x200000;  // sm_100f / compute_100f ...

// Layout of __fatBinC_Wrapper_t (crt/host_runtime.h / fatbinary_section.h), 64-bit hosts.
struct FatbinWrapper {
  uint32_t magic;                 // kWrapperMagic
  uint32_t version;               // 1, or 2 for wrappers with prelinked fatbins
  const void* data;               // fatbin container
  const void* filenameOrFatbins;  // v1: unused/filename; v2: NULL-terminated array of fatbins
};

enum class EntryKind : uint16_t { kPtx = 1, kCubin = 2 };

struct Entry {
  EntryKind kind;
  uint32_t smArch;      // e.g. 90 for sm_90 / compute_90 (major * 10 + minor)
  bool archSpecific;    // sm_90a / compute_90a: loadable only on exactly that arch
  std::string payload;  // decompressed: PTX text (trailing NULs stripped) or ELF cubin
  bool familySpecific = false;  // sm_100f / compute_100f: loadable within the major family
  uint64_t flags = 0;           // raw entry header flags (kFlag*), including compression
};

// Bounds-checked parse of the fatbin container at the start of `bytes` (bytes after the
// container are ignored). Entries of kinds other than PTX and cubin (e.g. LTO IR) are skipped.
// On success appends to `entries`; on failure leaves `entries` untouched, sets `error` and
// returns false.
bool parseContainer(std::span<const uint8_t> bytes, std::vector<Entry>& entries,
                    std::string& error);

// Like parseContainer, but `bytes` must be one or more containers back to back, optionally
// separated by zero padding (a linked program's .nv_fatbin holds one per translation unit).
bool parseContainers(std::span<const uint8_t> bytes, std::vector<Entry>& entries,
                     std::string& error);

// What a wrapper says, read from trusted memory. Accepts versions 1 and 2.
struct WrapperView {
  uint32_t version = 0;
  std::span<const uint8_t> container;      // the container `data` points at
  const void* const* prelinked = nullptr;  // version 2 only: NULL-terminated array, may be null
};
bool readWrapper(const void* wrapper, WrapperView& view, std::string& error);

// The container bytes a __fatBinC_Wrapper_t points at (trusted memory). Empty span if it is
// not a version 1 wrapper; `error` says why.
std::span<const uint8_t> containerFromWrapper(const void* wrapper, std::string& error);

// What cuModuleLoadData / cuModuleLoadFatBinary / cuLibraryLoadData may receive.
enum class ImageKind { kWrapper, kContainer, kCubin, kPtx, kUnknown };
struct ModuleImage {
  ImageKind kind;
  // The image's own bytes (trusted memory): for a wrapper its container (empty for a version 2
  // wrapper, which is unsupported, or a malformed one: containerFromWrapper says why); for PTX the text including its terminating NUL, so the
  // bytes can be handed to cuModuleLoadData as they are. Empty for kUnknown.
  std::span<const uint8_t> bytes;
};
ModuleImage moduleImage(const void* image);

// Total size of an in-memory little-endian ELF64 image from its headers: the furthest extent of
// the ELF header, section/program header tables and section/segment file contents. 0 if the
// memory does not hold a well-formed ELF64 header.
size_t elfImageSize(const uint8_t* elf);

// Bounds-checked lookup of an ELF64 section by name (e.g. ".nv_fatbin" in an object file or
// executable). Empty span if absent, SHT_NOBITS, or the image is malformed.
std::span<const uint8_t> findElfSection(std::span<const uint8_t> elf, std::string_view name);

// One section of an ELF64 image, as forEachElfSection shows it.
struct ElfSection {
  std::string_view name;
  uint32_t type;                   // SHT_*
  std::span<const uint8_t> bytes;  // empty for SHT_NOBITS or when it does not fit the image
  uint64_t entrySize;
  uint64_t size;                   // sh_size, also for SHT_NOBITS
};
// Bounds-checked walk over the sections of an ELF64 image (SHT_NULL ones skipped) until `visit`
// returns false. False if the image is malformed (sections before that point were visited).
bool forEachElfSection(std::span<const uint8_t> elf, const std::function<bool(const ElfSection&)>& visit);

// Choose what a device of compute capability major.minor can load: a cubin of the same major
// with the highest minor <= the device's (arch-specific "a" cubins only on exactly their arch,
// and preferred there); otherwise the PTX with the highest arch <= the device's, which the
// driver JIT-compiles ("a" PTX only on exactly its arch, "f" PTX only within its major).
// nullptr if nothing fits.
const Entry* selectForDevice(const std::vector<Entry>& entries, int major, int minor);

// "sm_90", "sm_90a", "compute_100f": for logs and error messages.
std::string entryName(const Entry& entry);

}  // namespace tally::fatbin
