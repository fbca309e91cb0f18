#include "common/fatbin/fatbin.h"

#include <elf.h>
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>

// What was verified with CUDA 13.0 (nvcc V13.0.88), by hexdumps of `nvcc -fatbin` output for
// -compress-mode=none|default|speed|size, -G, -lineinfo, sm_90a, sm_100a/f, sm_120, lto_90, of
// the .nv_fatbin section of `nvcc -c` objects and of linked (also -rdc) executables:
//
// Container: {u32 magic 0xBA55ED50; u16 version 1; u16 header_size 16; u64 files_size}, then
// entries filling exactly files_size bytes. `nvcc -fatbin` output and an object's .nv_fatbin
// hold one container (the object's section is byte-identical to the -fatbin file); a linked
// executable's .nv_fatbin holds one per translation unit, back to back (each container's size
// is a multiple of 8, so no padding was seen between them), plus one for the device-link stub.
//
// Entry header (little-endian, at least 64 bytes; header_size says how many):
//    0 u16 kind            1 PTX, 2 ELF cubin, 8 LTO IR (code=lto_90; skipped here)
//    2 u16 version         0x0101
//    4 u32 header_size     64; 72 with an object name; 80 for PTX; 112 for sm_100+ cubins
//    8 u64 payload_size    stored bytes, padded to a multiple of 8
//   16 u32 compressed_size exact compressed length; 0 when stored uncompressed
//   20 u32 options_offset  0, or offset in this header of {u32 offset; u32 length} locating an
//                          options blob (PTX: empty; LTO IR: "-ftz=0 -prec_div=1 ...")
//   24 u16 minor           PTX: ISA version (9.0 -> minor 0, major 9); cubin: 8 and 1
//   26 u16 major
//   28 u32 sm_arch         80, 86, 89, 90, 100, 120 ... (same number for the "a"/"f" variants)
//   32 u32 obj_name_offset offset in this header of the source name ("k.cu", -G / -lineinfo)
//   36 u32 obj_name_len
//   40 u64 flags           0x1 64-bit, 0x2 debug (-G), 0x10 linux, 0x2000 LZ4, 0x8000 Zstd,
//                          0x100000 "a" arch-specific, 0x200000 "f" family-specific;
//                          0x1000000 set on every sm_100+ cubin, 0x10000 on LTO IR (unknown)
//   48 u64 reserved        0 except for LTO IR
//   56 u64 uncompressed_size exact decompressed length (PTX: text + one NUL); 0 when stored
// The payload follows the header; the next entry starts at entry + header_size + payload_size.
// Uncompressed PTX is the text followed by NUL padding up to payload_size.
//
// Compression: default mode stores cubins and Zstd-compresses PTX; "none" stores both; "speed"
// compresses PTX as a raw LZ4 block (LZ4_decompress_safe, not the LZ4 frame format); "size"
// Zstd-compresses cubins too. -G Zstd-compresses the cubin. Zstd frames carry their content
// size.
//
// Wrapper (__fatBinC_Wrapper_t, 24 bytes): {u32 magic 0x466243b1; u32 version; data; field}.
// Note: with CUDA 13 every linked program, even without -rdc, has one version 2 wrapper (the
// device-link stub's; its field points at __cudaPrelinkedFatbins) next to the per-TU version 1
// wrappers.

namespace tally::fatbin {
namespace {

static_assert(std::endian::native == std::endian::little,
              "fatbins and cubins are little-endian and are read with memcpy");

struct ContainerHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t headerSize;
  uint64_t filesSize;
};
static_assert(sizeof(ContainerHeader) == 16);

struct EntryHeader {
  uint16_t kind;
  uint16_t version;
  uint32_t headerSize;
  uint64_t payloadSize;
  uint32_t compressedSize;
  uint32_t optionsOffset;
  uint16_t minor;
  uint16_t major;
  uint32_t smArch;
  uint32_t objNameOffset;
  uint32_t objNameLength;
  uint64_t flags;
  uint64_t reserved;
  uint64_t uncompressedSize;
};
static_assert(sizeof(EntryHeader) == 64);
static_assert(offsetof(EntryHeader, flags) == 40 && offsetof(EntryHeader, uncompressedSize) == 56);

constexpr uint16_t kContainerVersion = 1;
constexpr uint32_t kWrapperVersion = 1;
constexpr uint32_t kWrapperVersionPrelinked = 2;
// LZ4 spends at least one input byte per 255 output bytes of a match, so a claimed size beyond
// this is corrupt; checking it first keeps a forged size from costing a huge allocation.
constexpr uint64_t kLz4MaxRatio = 256;
constexpr uint64_t kLz4RatioSlack = 64;
// Sanity bound for container sizes read from trusted memory: garbage there must not turn into
// a span of exabytes.
constexpr uint64_t kMaxContainerBytes = uint64_t{1} << 36;
// Bounds the loops over section headers when ELF extended numbering takes the count from a
// 64-bit field.
constexpr uint64_t kMaxElfSections = uint64_t{1} << 20;
constexpr uint8_t kElfMagic[] = {0x7f, 'E', 'L', 'F'};
constexpr uint32_t kElfMagicWord = 0x464c457f;  // kElfMagic read as a little-endian u32

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string at(size_t offset) { return " at offset " + std::to_string(offset); }

// A byte range that is either an untrusted span or trusted memory of unknown length (size
// SIZE_MAX): one reader serves both, and for the untrusted case every read is bounds-checked.
struct Bytes {
  const uint8_t* data;
  size_t size;
};

Bytes untrusted(std::span<const uint8_t> bytes) { return {bytes.data(), bytes.size()}; }
Bytes trusted(const void* memory) { return {static_cast<const uint8_t*>(memory), SIZE_MAX}; }

// memcpy because nothing guarantees alignment of the fields we read.
template <typename T>
bool readAt(Bytes bytes, uint64_t offset, T& out) {
  if (offset > bytes.size || bytes.size - offset < sizeof(T)) return false;
  std::memcpy(&out, bytes.data + offset, sizeof(T));
  return true;
}

bool startsWithElfMagic(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof kElfMagic && std::memcmp(bytes.data(), kElfMagic, sizeof kElfMagic) == 0;
}

// ---- decompression ----

bool decompressLz4(std::span<const uint8_t> source, uint64_t expected, std::string& out,
                   std::string& error) {
  // A raw LZ4 block does not record its decompressed size, so the header must.
  if (expected == 0) {
    error = "LZ4 payload without uncompressed size";
    return false;
  }
  if (expected > kMaxDecompressedBytes || source.size() > INT_MAX) {
    error = "LZ4 payload too large (" + std::to_string(expected) + " bytes)";
    return false;
  }
  if (expected > source.size() * kLz4MaxRatio + kLz4RatioSlack) {
    error = "LZ4 payload of " + std::to_string(source.size()) + " bytes cannot expand to " +
            std::to_string(expected);
    return false;
  }
  out.resize(expected);
  const int produced =
      LZ4_decompress_safe(reinterpret_cast<const char*>(source.data()), out.data(),
                          static_cast<int>(source.size()), static_cast<int>(expected));
  if (produced < 0) {
    error = "corrupt LZ4 payload";
    return false;
  }
  if (static_cast<uint64_t>(produced) != expected) {
    error = "LZ4 payload decompressed to " + std::to_string(produced) + " bytes, header says " +
            std::to_string(expected);
    return false;
  }
  return true;
}

// Sums the content sizes the Zstd frames declare. Walking the frames also validates their
// boundaries (ZSTD_findFrameCompressedSize reads every block header), so the single allocation
// made afterwards is justified by the data itself, not only by the entry header.
bool zstdContentSize(std::span<const uint8_t> source, uint64_t& total, bool& known,
                     std::string& error) {
  total = 0;
  known = true;
  for (size_t position = 0; position < source.size();) {
    const uint8_t* frame = source.data() + position;
    const size_t available = source.size() - position;
    const size_t frameSize = ZSTD_findFrameCompressedSize(frame, available);
    if (ZSTD_isError(frameSize) || frameSize == 0 || frameSize > available) {
      error = std::string("corrupt Zstd payload: ") +
              (ZSTD_isError(frameSize) ? ZSTD_getErrorName(frameSize) : "bad frame size");
      return false;
    }
    const unsigned long long content = ZSTD_getFrameContentSize(frame, available);
    if (content == ZSTD_CONTENTSIZE_ERROR) {
      error = "corrupt Zstd frame header";
      return false;
    }
    if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
      known = false;
    } else if (content > kMaxDecompressedBytes - total) {
      error = "Zstd payload too large";
      return false;
    } else {
      total += content;
    }
    position += frameSize;
  }
  return true;
}

// For frames that do not declare their size (nvcc's always do): grow the output as data
// actually decompresses, never beyond `limit`.
bool decompressZstdStreaming(std::span<const uint8_t> source, uint64_t limit, std::string& out,
                             std::string& error) {
  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> context(ZSTD_createDCtx(), &ZSTD_freeDCtx);
  if (!context) {
    error = "out of memory for Zstd context";
    return false;
  }
  ZSTD_inBuffer input{source.data(), source.size(), 0};
  out.resize(std::min<uint64_t>(limit, std::max<uint64_t>(source.size() * 4, 1 << 16)));
  size_t produced = 0;
  for (;;) {
    ZSTD_outBuffer output{out.data(), out.size(), produced};
    const size_t result = ZSTD_decompressStream(context.get(), &output, &input);
    if (ZSTD_isError(result)) {
      error = std::string("corrupt Zstd payload: ") + ZSTD_getErrorName(result);
      return false;
    }
    produced = output.pos;
    if (result == 0 && input.pos == input.size) break;
    if (produced < out.size()) {
      if (input.pos == input.size) {
        error = "truncated Zstd payload";
        return false;
      }
      continue;
    }
    if (out.size() >= limit) {
      error = "Zstd payload decompresses to more than " + std::to_string(limit) + " bytes";
      return false;
    }
    out.resize(std::min<uint64_t>(limit, uint64_t{out.size()} * 2));
  }
  out.resize(produced);
  return true;
}

bool decompressZstd(std::span<const uint8_t> source, uint64_t expected, std::string& out,
                    std::string& error) {
  if (source.empty()) {
    error = "empty Zstd payload";
    return false;
  }
  if (expected > kMaxDecompressedBytes) {
    error = "Zstd payload too large (" + std::to_string(expected) + " bytes)";
    return false;
  }
  uint64_t declared = 0;
  bool known = false;
  if (!zstdContentSize(source, declared, known, error)) return false;
  if (known && expected != 0 && declared != expected) {
    error = "Zstd frames declare " + std::to_string(declared) + " bytes, header says " +
            std::to_string(expected);
    return false;
  }
  if (!known) {
    if (!decompressZstdStreaming(source, expected != 0 ? expected : kMaxDecompressedBytes, out,
                                 error)) {
      return false;
    }
  } else {
    out.resize(declared);
    const size_t produced = ZSTD_decompress(out.data(), out.size(), source.data(), source.size());
    if (ZSTD_isError(produced)) {
      error = std::string("corrupt Zstd payload: ") + ZSTD_getErrorName(produced);
      return false;
    }
    out.resize(produced);
  }
  if (expected != 0 && out.size() != expected) {
    error = "Zstd payload decompressed to " + std::to_string(out.size()) + " bytes, header says " +
            std::to_string(expected);
    return false;
  }
  return true;
}

// ---- containers ----

bool storedPayload(const EntryHeader& header, std::span<const uint8_t> stored, std::string& out,
                   std::string& error) {
  const bool lz4 = (header.flags & kFlagLz4) != 0;
  const bool zstd = (header.flags & kFlagZstd) != 0;
  if (lz4 && zstd) {
    error = "entry flags claim both LZ4 and Zstd compression";
    return false;
  }
  if (!lz4 && !zstd) {
    out.assign(reinterpret_cast<const char*>(stored.data()), stored.size());
    return true;
  }
  // Compressed payloads are padded to 8 bytes and the decompressors reject trailing bytes, so
  // use the exact length; older headers without it get the whole payload.
  const uint64_t length = header.compressedSize != 0 ? header.compressedSize : stored.size();
  if (length > stored.size()) {
    error = "compressed size " + std::to_string(length) + " exceeds payload size " +
            std::to_string(stored.size());
    return false;
  }
  const auto source = stored.first(static_cast<size_t>(length));
  return lz4 ? decompressLz4(source, header.uncompressedSize, out, error)
             : decompressZstd(source, header.uncompressedSize, out, error);
}

// Normalizes a decompressed payload and checks it is what its kind says.
bool finishPayload(EntryKind kind, std::string& payload, std::string& error) {
  if (kind == EntryKind::kPtx) {
    // PTX is stored NUL-terminated and NUL-padded; stripping makes stored and compressed
    // copies of the same module compare equal.
    const size_t end = payload.find_last_not_of('\0');
    payload.resize(end == std::string::npos ? 0 : end + 1);
    return true;
  }
  if (!startsWithElfMagic({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()})) {
    error = "cubin entry payload is not an ELF image";
    return false;
  }
  return true;
}

// Parses the entry at `offset` of a container's body and advances `offset` past it.
// `base` is the body's offset in the caller's input, for messages.
bool parseEntry(std::span<const uint8_t> body, size_t base, size_t& offset,
                std::vector<Entry>& entries, std::string& error) {
  EntryHeader header;
  if (!readAt(untrusted(body), offset, header)) {
    error = "truncated fatbin entry header" + at(base + offset);
    return false;
  }
  const size_t available = body.size() - offset;
  if (header.headerSize < sizeof(EntryHeader) || header.headerSize > available) {
    error = "bad fatbin entry header size " + std::to_string(header.headerSize) + at(base + offset);
    return false;
  }
  if (header.payloadSize > available - header.headerSize) {
    error = "fatbin entry payload of " + std::to_string(header.payloadSize) +
            " bytes overruns its container" + at(base + offset);
    return false;
  }
  const auto stored = body.subspan(offset + header.headerSize, static_cast<size_t>(header.payloadSize));
  const size_t entryOffset = offset;
  offset += header.headerSize + static_cast<size_t>(header.payloadSize);

  // Other kinds (LTO IR, ...) are nothing a driver loads directly.
  if (header.kind != static_cast<uint16_t>(EntryKind::kPtx) &&
      header.kind != static_cast<uint16_t>(EntryKind::kCubin)) {
    return true;
  }
  Entry entry{.kind = static_cast<EntryKind>(header.kind),
              .smArch = header.smArch,
              .archSpecific = (header.flags & kFlagArchSpecific) != 0,
              .payload = {},
              .familySpecific = (header.flags & kFlagFamilySpecific) != 0,
              .flags = header.flags};
  if (!storedPayload(header, stored, entry.payload, error) ||
      !finishPayload(entry.kind, entry.payload, error)) {
    error = entryName(entry) + " entry" + at(base + entryOffset) + ": " + error;
    return false;
  }
  entries.push_back(std::move(entry));
  return true;
}

// Parses the container at the start of `bytes`; `consumed` is its total size.
bool parseOneContainer(std::span<const uint8_t> bytes, size_t base, std::vector<Entry>& entries,
                       size_t& consumed, std::string& error) {
  ContainerHeader header;
  if (!readAt(untrusted(bytes), 0, header)) {
    error = "truncated fatbin container header" + at(base);
    return false;
  }
  if (header.magic != kContainerMagic) {
    error = "bad fatbin container magic " + hex(header.magic) + at(base);
    return false;
  }
  if (header.version != kContainerVersion) {
    error = "unsupported fatbin container version " + std::to_string(header.version) + at(base);
    return false;
  }
  if (header.headerSize < sizeof(ContainerHeader) || header.headerSize > bytes.size()) {
    error = "bad fatbin container header size " + std::to_string(header.headerSize) + at(base);
    return false;
  }
  if (header.filesSize > bytes.size() - header.headerSize) {
    error = "fatbin container" + at(base) + " claims " + std::to_string(header.filesSize) +
            " bytes of entries, only " + std::to_string(bytes.size() - header.headerSize) +
            " present";
    return false;
  }
  const auto body = bytes.subspan(header.headerSize, static_cast<size_t>(header.filesSize));
  for (size_t offset = 0; offset < body.size();) {
    if (!parseEntry(body, base + header.headerSize, offset, entries, error)) return false;
  }
  consumed = header.headerSize + body.size();
  return true;
}

// Trusted memory: the container `data` points at, sized from its header.
std::span<const uint8_t> containerAt(const void* data, std::string& error) {
  if (data == nullptr) {
    error = "fatbin wrapper without data";
    return {};
  }
  ContainerHeader header;
  std::memcpy(&header, data, sizeof header);
  if (header.magic != kContainerMagic) {
    error = "bad fatbin container magic " + hex(header.magic);
    return {};
  }
  if (header.version != kContainerVersion || header.headerSize < sizeof(ContainerHeader) ||
      header.filesSize > kMaxContainerBytes) {
    error = "malformed fatbin container header";
    return {};
  }
  return {static_cast<const uint8_t*>(data), header.headerSize + static_cast<size_t>(header.filesSize)};
}

// ---- ELF ----

struct ElfLayout {
  Elf64_Ehdr header;
  uint64_t sectionCount;
  uint64_t namesSection;
};

bool readSectionHeader(Bytes image, const Elf64_Ehdr& header, uint64_t index, Elf64_Shdr& out) {
  uint64_t offset;
  if (__builtin_mul_overflow(index, uint64_t{header.e_shentsize}, &offset) ||
      __builtin_add_overflow(offset, header.e_shoff, &offset)) {
    return false;
  }
  return readAt(image, offset, out);
}

bool readProgramHeader(Bytes image, const Elf64_Ehdr& header, uint64_t index, Elf64_Phdr& out) {
  uint64_t offset;
  if (__builtin_mul_overflow(index, uint64_t{header.e_phentsize}, &offset) ||
      __builtin_add_overflow(offset, header.e_phoff, &offset)) {
    return false;
  }
  return readAt(image, offset, out);
}

bool readElfLayout(Bytes image, ElfLayout& layout) {
  Elf64_Ehdr& header = layout.header;
  if (!readAt(image, 0, header)) return false;
  if (std::memcmp(header.e_ident, kElfMagic, sizeof kElfMagic) != 0 ||
      header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB) {
    return false;
  }
  // Entries smaller than the structures we read would make us misread the tables.
  if (header.e_shoff != 0 && header.e_shentsize < sizeof(Elf64_Shdr)) return false;
  if (header.e_phnum != 0 && header.e_phentsize < sizeof(Elf64_Phdr)) return false;
  layout.sectionCount = header.e_shoff == 0 ? 0 : header.e_shnum;
  layout.namesSection = header.e_shstrndx;
  // Extended numbering (>= 0xff00 sections): the real values live in section header 0.
  if (header.e_shoff != 0 && (header.e_shnum == 0 || header.e_shstrndx == SHN_XINDEX)) {
    Elf64_Shdr first;
    if (!readSectionHeader(image, header, 0, first)) return false;
    if (header.e_shnum == 0) layout.sectionCount = first.sh_size;
    if (header.e_shstrndx == SHN_XINDEX) layout.namesSection = first.sh_link;
  }
  return layout.sectionCount <= kMaxElfSections;
}

bool extendTo(uint64_t offset, uint64_t size, uint64_t& extent) {
  uint64_t end;
  if (__builtin_add_overflow(offset, size, &end)) return false;
  extent = std::max(extent, end);
  return true;
}

bool tableExtent(uint64_t offset, uint64_t count, uint64_t entrySize, uint64_t& extent) {
  uint64_t size;
  if (count == 0) return true;
  return !__builtin_mul_overflow(count, entrySize, &size) && extendTo(offset, size, extent);
}

std::span<const uint8_t> sectionBytes(std::span<const uint8_t> elf, const Elf64_Shdr& section) {
  if (section.sh_type == SHT_NOBITS || section.sh_offset > elf.size() ||
      section.sh_size > elf.size() - section.sh_offset) {
    return {};
  }
  return elf.subspan(static_cast<size_t>(section.sh_offset), static_cast<size_t>(section.sh_size));
}

// The NUL-terminated name at `offset` of a string table; empty if it does not fit.
std::string_view nameAt(std::span<const uint8_t> names, uint64_t offset) {
  if (offset >= names.size()) return {};
  const auto* start = reinterpret_cast<const char*>(names.data()) + offset;
  const auto* end = static_cast<const char*>(std::memchr(start, '\0', names.size() - offset));
  return end == nullptr ? std::string_view{} : std::string_view(start, end - start);
}

// ---- module images ----

// Compares against a magic that contains no NUL byte, one byte at a time: a shorter
// NUL-terminated string (PTX) mismatches at its NUL at the latest, so we never read past it.
bool hasMagic(const uint8_t* image, uint32_t magic) {
  for (int i = 0; i < 4; ++i) {
    if (image[i] != static_cast<uint8_t>(magic >> (8 * i))) return false;
  }
  return true;
}

bool isTextByte(uint8_t byte) {
  return byte >= 0x20 || byte == '\t' || byte == '\n' || byte == '\r' || byte == '\f' ||
         byte == '\v';
}

ModuleImage ptxImage(const uint8_t* image) {
  size_t length = 0;
  for (; image[length] != 0; ++length) {
    if (!isTextByte(image[length])) return {ImageKind::kUnknown, {}};
  }
  // Every PTX module has a .version directive; text without one is nothing we know.
  const std::string_view text(reinterpret_cast<const char*>(image), length);
  if (text.find(".version") == std::string_view::npos) return {ImageKind::kUnknown, {}};
  return {ImageKind::kPtx, {image, length + 1}};
}

// Ordering for selectForDevice: higher arch first; at equal arch the "a" variant, which was
// compiled for exactly this device.
bool betterThan(const Entry& candidate, const Entry* best) {
  if (best == nullptr) return true;
  if (candidate.smArch != best->smArch) return candidate.smArch > best->smArch;
  return candidate.archSpecific && !best->archSpecific;
}

}  // namespace

bool parseContainer(std::span<const uint8_t> bytes, std::vector<Entry>& entries,
                    std::string& error) {
  std::vector<Entry> parsed;
  size_t consumed = 0;
  if (!parseOneContainer(bytes, 0, parsed, consumed, error)) return false;
  std::move(parsed.begin(), parsed.end(), std::back_inserter(entries));
  return true;
}

bool parseContainers(std::span<const uint8_t> bytes, std::vector<Entry>& entries,
                     std::string& error) {
  std::vector<Entry> parsed;
  size_t containers = 0;
  size_t offset = 0;
  for (;;) {
    // Linkers align each input section, so zero padding may sit between containers.
    while (offset < bytes.size() && bytes[offset] == 0) ++offset;
    if (offset == bytes.size()) break;
    size_t consumed = 0;
    if (!parseOneContainer(bytes.subspan(offset), offset, parsed, consumed, error)) return false;
    offset += consumed;
    ++containers;
  }
  if (containers == 0) {
    error = "no fatbin container";
    return false;
  }
  std::move(parsed.begin(), parsed.end(), std::back_inserter(entries));
  return true;
}

bool readWrapper(const void* wrapper, WrapperView& view, std::string& error) {
  if (wrapper == nullptr) {
    error = "null fatbin wrapper";
    return false;
  }
  FatbinWrapper fields;
  std::memcpy(&fields, wrapper, sizeof fields);
  if (fields.magic != kWrapperMagic) {
    error = "bad fatbin wrapper magic " + hex(fields.magic);
    return false;
  }
  if (fields.version != kWrapperVersion && fields.version != kWrapperVersionPrelinked) {
    error = "unsupported fatbin wrapper version " + std::to_string(fields.version);
    return false;
  }
  const auto container = containerAt(fields.data, error);
  if (container.empty()) return false;
  view.version = fields.version;
  view.container = container;
  view.prelinked = fields.version == kWrapperVersionPrelinked
                       ? static_cast<const void* const*>(fields.filenameOrFatbins)
                       : nullptr;
  return true;
}

std::span<const uint8_t> containerFromWrapper(const void* wrapper, std::string& error) {
  WrapperView view;
  if (!readWrapper(wrapper, view, error)) return {};
  if (view.version != kWrapperVersion) {
    error = "fatbin wrapper version " + std::to_string(view.version) +
            " (with prelinked fatbins) is not supported";
    return {};
  }
  return view.container;
}

ModuleImage moduleImage(const void* image) {
  if (image == nullptr) return {ImageKind::kUnknown, {}};
  const auto* bytes = static_cast<const uint8_t*>(image);
  std::string error;
  if (hasMagic(bytes, kWrapperMagic)) {
    return {ImageKind::kWrapper, containerFromWrapper(image, error)};
  }
  if (hasMagic(bytes, kContainerMagic)) {
    const auto container = containerAt(image, error);
    if (container.empty()) return {ImageKind::kUnknown, {}};
    return {ImageKind::kContainer, container};
  }
  if (hasMagic(bytes, kElfMagicWord)) {
    const size_t size = elfImageSize(bytes);
    if (size == 0) return {ImageKind::kUnknown, {}};
    return {ImageKind::kCubin, {bytes, size}};
  }
  return ptxImage(bytes);
}

size_t elfImageSize(const uint8_t* elf) {
  if (elf == nullptr) return 0;
  const Bytes image = trusted(elf);
  ElfLayout layout;
  if (!readElfLayout(image, layout)) return 0;
  const Elf64_Ehdr& header = layout.header;
  uint64_t extent = sizeof(Elf64_Ehdr);
  if (!tableExtent(header.e_phoff, header.e_phnum, header.e_phentsize, extent) ||
      !tableExtent(header.e_shoff, layout.sectionCount, header.e_shentsize, extent)) {
    return 0;
  }
  for (uint64_t i = 0; i < layout.sectionCount; ++i) {
    Elf64_Shdr section;
    if (!readSectionHeader(image, header, i, section)) return 0;
    if (section.sh_type == SHT_NOBITS || section.sh_type == SHT_NULL) continue;
    if (!extendTo(section.sh_offset, section.sh_size, extent)) return 0;
  }
  for (uint64_t i = 0; i < header.e_phnum; ++i) {
    Elf64_Phdr segment;
    if (!readProgramHeader(image, header, i, segment)) return 0;
    if (!extendTo(segment.p_offset, segment.p_filesz, extent)) return 0;
  }
  return extent > SIZE_MAX ? 0 : static_cast<size_t>(extent);
}

bool forEachElfSection(std::span<const uint8_t> elf, const std::function<bool(const ElfSection&)>& visit) {
  const Bytes image = untrusted(elf);
  ElfLayout layout;
  if (!readElfLayout(image, layout) || layout.namesSection >= layout.sectionCount) return false;
  Elf64_Shdr namesHeader;
  if (!readSectionHeader(image, layout.header, layout.namesSection, namesHeader)) return false;
  const auto names = sectionBytes(elf, namesHeader);
  if (names.empty()) return false;
  for (uint64_t i = 0; i < layout.sectionCount; ++i) {
    Elf64_Shdr section;
    if (!readSectionHeader(image, layout.header, i, section)) return false;
    if (section.sh_type == SHT_NULL) continue;
    if (!visit(ElfSection{nameAt(names, section.sh_name), section.sh_type, sectionBytes(elf, section),
                          section.sh_entsize, section.sh_size})) {
      break;
    }
  }
  return true;
}

std::span<const uint8_t> findElfSection(std::span<const uint8_t> elf, std::string_view name) {
  std::span<const uint8_t> found;
  forEachElfSection(elf, [&](const ElfSection& section) {
    if (section.name != name) return true;
    found = section.bytes;
    return false;
  });
  return found;
}

const Entry* selectForDevice(const std::vector<Entry>& entries, int major, int minor) {
  // Archs are encoded major * 10 + minor, so a minor beyond 9 has no encoding.
  if (major < 0 || minor < 0 || minor > 9) return nullptr;
  const uint32_t device = static_cast<uint32_t>(major * 10 + minor);
  const auto sameMajor = [&](const Entry& e) { return e.smArch / 10 == static_cast<uint32_t>(major); };

  // A cubin runs on devices of its major with an equal or higher minor.
  const Entry* best = nullptr;
  for (const Entry& entry : entries) {
    if (entry.kind != EntryKind::kCubin || !sameMajor(entry) || entry.smArch > device) continue;
    if (entry.archSpecific && entry.smArch != device) continue;
    if (betterThan(entry, best)) best = &entry;
  }
  if (best != nullptr) return best;

  // PTX is JIT-compiled for any newer device, unless restricted to its arch or family.
  for (const Entry& entry : entries) {
    if (entry.kind != EntryKind::kPtx || entry.smArch > device) continue;
    if (entry.archSpecific && entry.smArch != device) continue;
    if (entry.familySpecific && !sameMajor(entry)) continue;
    if (betterThan(entry, best)) best = &entry;
  }
  return best;
}

std::string entryName(const Entry& entry) {
  std::string name = entry.kind == EntryKind::kPtx ? "compute_" : "sm_";
  name += std::to_string(entry.smArch);
  if (entry.archSpecific) {
    name += 'a';
  } else if (entry.familySpecific) {
    name += 'f';
  }
  return name;
}

}  // namespace tally::fatbin
