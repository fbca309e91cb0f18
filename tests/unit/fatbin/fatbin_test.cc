// Tests of tally_fatbin against real nvcc output (built by this folder's CMakeLists from
// kernels.cu and second_kernels.cu) and against corrupted copies of it.
#include "common/fatbin/fatbin.h"

#include <gtest/gtest.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tally::fatbin {
namespace {

using Bytes = std::vector<uint8_t>;

const char* const kKernelNames[] = {"tallyAddOne", "_Z10tallyScalePffi",
                                    "_Z9tallyFillIdEvPT_S0_i"};
const char* const kCompressModes[] = {"default", "none", "speed", "size"};

Bytes readInput(const std::string& name) {
  std::ifstream file(std::string(TALLY_FATBIN_INPUT_DIR) + "/" + name, std::ios::binary);
  const std::string data(std::istreambuf_iterator<char>(file), {});
  // Copied so the allocation is exactly the file's size and ASan sees any overread.
  return Bytes(data.begin(), data.end());
}

std::vector<Entry> parseInput(const std::string& name) {
  const Bytes bytes = readInput(name);
  std::vector<Entry> entries;
  std::string error;
  EXPECT_FALSE(bytes.empty()) << name;
  EXPECT_TRUE(parseContainer(bytes, entries, error)) << name << ": " << error;
  EXPECT_TRUE(error.empty()) << error;
  return entries;
}

const Entry* findEntry(const std::vector<Entry>& entries, EntryKind kind, uint32_t arch) {
  for (const Entry& entry : entries) {
    if (entry.kind == kind && entry.smArch == arch) return &entry;
  }
  return nullptr;
}

bool hasElfMagic(const std::string& payload) { return payload.rfind("\x7f" "ELF", 0) == 0; }

bool within(std::span<const uint8_t> inner, std::span<const uint8_t> outer) {
  return inner.empty() ||
         (inner.data() >= outer.data() && inner.data() + inner.size() <= outer.data() + outer.size());
}

template <typename T>
void store(Bytes& bytes, size_t offset, T value) {
  ASSERT_LE(offset + sizeof(T), bytes.size());
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

template <typename T>
T load(const Bytes& bytes, size_t offset) {
  T value{};
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// Entry header offsets in a single-container file, walked with the layout documented in
// fatbin.cc (the tests trust nvcc's output here; the parser does not).
std::vector<size_t> entryOffsets(const Bytes& container) {
  std::vector<size_t> offsets;
  const size_t end = load<uint16_t>(container, 6) + load<uint64_t>(container, 8);
  for (size_t offset = load<uint16_t>(container, 6); offset < end;
       offset += load<uint32_t>(container, offset + 4) + load<uint64_t>(container, offset + 8)) {
    offsets.push_back(offset);
  }
  return offsets;
}

// Entry header field offsets (see fatbin.cc).
constexpr size_t kHeaderSizeField = 4;
constexpr size_t kPayloadSizeField = 8;
constexpr size_t kCompressedSizeField = 16;
constexpr size_t kFlagsField = 40;
constexpr size_t kUncompressedSizeField = 56;

// A container built by hand, for cases nvcc does not produce. Header layout as in fatbin.cc.
struct RawEntry {
  uint16_t kind;
  uint32_t arch;
  uint64_t flags;
  std::string stored;
  uint32_t compressedSize = 0;
  uint64_t uncompressedSize = 0;
};

Bytes makeContainer(const std::vector<RawEntry>& entries) {
  Bytes body;
  for (const RawEntry& entry : entries) {
    Bytes header(64, 0);
    const uint64_t padded = (entry.stored.size() + 7) / 8 * 8;
    std::memcpy(&header[0], &entry.kind, 2);
    std::memcpy(&header[2], "\x01\x01", 2);
    header[4] = 64;
    std::memcpy(&header[8], &padded, 8);
    std::memcpy(&header[16], &entry.compressedSize, 4);
    std::memcpy(&header[28], &entry.arch, 4);
    std::memcpy(&header[40], &entry.flags, 8);
    std::memcpy(&header[56], &entry.uncompressedSize, 8);
    body.insert(body.end(), header.begin(), header.end());
    body.insert(body.end(), entry.stored.begin(), entry.stored.end());
    body.resize(body.size() + padded - entry.stored.size(), 0);
  }
  Bytes container(16, 0);
  const uint32_t magic = kContainerMagic;
  const uint64_t size = body.size();
  std::memcpy(&container[0], &magic, 4);
  container[4] = 1;
  container[6] = 16;
  std::memcpy(&container[8], &size, 8);
  container.insert(container.end(), body.begin(), body.end());
  return container;
}

// nvcc's frames always declare their content size; these may not.
std::string zstdCompress(const std::string& text, bool declareSize) {
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> context(ZSTD_createCCtx(), &ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(context.get(), ZSTD_c_contentSizeFlag, declareSize ? 1 : 0);
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t size = ZSTD_compress2(context.get(), out.data(), out.size(), text.data(), text.size());
  EXPECT_FALSE(ZSTD_isError(size));
  out.resize(size);
  return out;
}

std::string samplePtx() {
  std::string ptx = ".version 9.0\n.target sm_80\n.address_size 64\n";
  for (int i = 0; i < 200; ++i) ptx += "// filler line " + std::to_string(i) + "\n";
  return ptx;
}

// ---- parsing real nvcc output ----

TEST(FatbinParse, DefaultBuildHasCubinAndPtxForBothArchs) {
  const auto entries = parseInput("kernels_default.fatbin");
  ASSERT_EQ(entries.size(), 4u);
  for (const EntryKind kind : {EntryKind::kCubin, EntryKind::kPtx}) {
    for (const uint32_t arch : {80u, 90u}) {
      const auto matches = std::count_if(entries.begin(), entries.end(), [&](const Entry& e) {
        return e.kind == kind && e.smArch == arch;
      });
      EXPECT_EQ(matches, 1) << "kind " << static_cast<int>(kind) << " arch " << arch;
    }
  }
  for (const Entry& entry : entries) {
    EXPECT_FALSE(entry.archSpecific);
    EXPECT_FALSE(entry.familySpecific);
    EXPECT_TRUE(entry.flags & kFlag64Bit);
  }
  EXPECT_EQ(entryName(*findEntry(entries, EntryKind::kCubin, 80)), "sm_80");
  EXPECT_EQ(entryName(*findEntry(entries, EntryKind::kPtx, 90)), "compute_90");
}

TEST(FatbinParse, PtxHoldsEntriesAndMangledNames) {
  const auto entries = parseInput("kernels_default.fatbin");
  int ptxCount = 0;
  for (const Entry& entry : entries) {
    if (entry.kind != EntryKind::kPtx) continue;
    ++ptxCount;
    const std::string& ptx = entry.payload;
    EXPECT_NE(ptx.find(".version"), std::string::npos);
    EXPECT_NE(ptx.find(".target sm_" + std::to_string(entry.smArch)), std::string::npos);
    EXPECT_NE(ptx.find(".entry"), std::string::npos);
    for (const char* name : kKernelNames) EXPECT_NE(ptx.find(name), std::string::npos) << name;
    EXPECT_EQ(ptx.find('\0'), std::string::npos) << "PTX keeps its NUL terminator or padding";
  }
  EXPECT_EQ(ptxCount, 2);
}

TEST(FatbinParse, CubinsAreElfImages) {
  const auto entries = parseInput("kernels_default.fatbin");
  int cubinCount = 0;
  for (const Entry& entry : entries) {
    if (entry.kind != EntryKind::kCubin) continue;
    ++cubinCount;
    ASSERT_TRUE(hasElfMagic(entry.payload));
    // The stored payload is the ELF image padded to 8 bytes.
    const size_t size = elfImageSize(reinterpret_cast<const uint8_t*>(entry.payload.data()));
    EXPECT_LE(size, entry.payload.size());
    EXPECT_GT(size + 8, entry.payload.size());
    for (const char* name : kKernelNames) {
      EXPECT_NE(entry.payload.find(name), std::string::npos) << name;
    }
  }
  EXPECT_EQ(cubinCount, 2);
}

// Guards the premise of the next test: each mode really stores what we think it stores.
TEST(FatbinParse, CompressionModesShowInFlags) {
  const auto flagsOf = [](const std::vector<Entry>& entries, EntryKind kind) {
    uint64_t flags = 0;
    for (const Entry& e : entries) {
      if (e.kind == kind) flags |= e.flags;
    }
    return flags & (kFlagLz4 | kFlagZstd);
  };
  const auto none = parseInput("kernels_none.fatbin");
  EXPECT_EQ(flagsOf(none, EntryKind::kCubin) | flagsOf(none, EntryKind::kPtx), 0u);
  const auto standard = parseInput("kernels_default.fatbin");
  EXPECT_EQ(flagsOf(standard, EntryKind::kCubin), 0u);
  EXPECT_EQ(flagsOf(standard, EntryKind::kPtx), kFlagZstd);
  const auto speed = parseInput("kernels_speed.fatbin");
  EXPECT_EQ(flagsOf(speed, EntryKind::kCubin), 0u);
  EXPECT_EQ(flagsOf(speed, EntryKind::kPtx), kFlagLz4);
  const auto size = parseInput("kernels_size.fatbin");
  EXPECT_EQ(flagsOf(size, EntryKind::kCubin), kFlagZstd);
  EXPECT_EQ(flagsOf(size, EntryKind::kPtx), kFlagZstd);
}

TEST(FatbinParse, CompressionModesDecompressToIdenticalPayloads) {
  const auto reference = parseInput("kernels_none.fatbin");
  ASSERT_EQ(reference.size(), 4u);
  for (const char* mode : kCompressModes) {
    const auto entries = parseInput(std::string("kernels_") + mode + ".fatbin");
    ASSERT_EQ(entries.size(), reference.size()) << mode;
    for (size_t i = 0; i < entries.size(); ++i) {
      EXPECT_EQ(entries[i].kind, reference[i].kind) << mode << " entry " << i;
      EXPECT_EQ(entries[i].smArch, reference[i].smArch) << mode << " entry " << i;
      EXPECT_TRUE(entries[i].payload == reference[i].payload) << mode << " entry " << i;
    }
  }
}

TEST(FatbinParse, ArchSpecificBuild) {
  const auto entries = parseInput("kernels_90a.fatbin");
  ASSERT_EQ(entries.size(), 2u);
  for (const Entry& entry : entries) {
    EXPECT_EQ(entry.smArch, 90u);
    EXPECT_TRUE(entry.archSpecific);
  }
  const Entry* cubin = findEntry(entries, EntryKind::kCubin, 90);
  ASSERT_NE(cubin, nullptr);
  EXPECT_EQ(entryName(*cubin), "sm_90a");
  EXPECT_EQ(selectForDevice(entries, 9, 0), cubin);
  EXPECT_EQ(selectForDevice(entries, 10, 0), nullptr) << "compute_90a PTX only JITs on 9.0";
  EXPECT_EQ(selectForDevice(entries, 8, 9), nullptr);
}

TEST(FatbinParse, BackToBackContainers) {
  const Bytes none = readInput("kernels_none.fatbin");
  const Bytes size = readInput("kernels_size.fatbin");
  Bytes joined = none;
  joined.insert(joined.end(), 8, 0);  // alignment padding as a linker may leave it
  joined.insert(joined.end(), size.begin(), size.end());
  std::vector<Entry> all;
  std::vector<Entry> first;
  std::string error;
  ASSERT_TRUE(parseContainers(joined, all, error)) << error;
  EXPECT_EQ(all.size(), 8u);
  ASSERT_TRUE(parseContainer(joined, first, error)) << error;
  EXPECT_EQ(first.size(), 4u);

  joined.push_back(0x42);  // trailing garbage is no container
  all.clear();
  EXPECT_FALSE(parseContainers(joined, all, error));
  EXPECT_FALSE(error.empty());
  EXPECT_TRUE(all.empty());
}

TEST(FatbinParse, AppendsOnSuccessAndKeepsEntriesOnFailure) {
  const Bytes bytes = readInput("kernels_default.fatbin");
  std::vector<Entry> entries(1, Entry{EntryKind::kPtx, 70, false, "sentinel"});
  std::string error;
  ASSERT_TRUE(parseContainer(bytes, entries, error)) << error;
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(entries[0].payload, "sentinel");

  Bytes truncated(bytes.begin(), bytes.end() - 1);
  EXPECT_FALSE(parseContainer(truncated, entries, error));
  EXPECT_FALSE(parseContainers(truncated, entries, error));
  EXPECT_EQ(entries.size(), 5u);
  EXPECT_FALSE(parseContainers({}, entries, error));
  EXPECT_FALSE(parseContainer({}, entries, error));
}

TEST(FatbinSynthetic, ZstdFramesWithoutContentSize) {
  const std::string ptx = samplePtx();
  const std::string text = ptx + std::string(1, '\0');
  const std::string compressed = zstdCompress(text, false);
  ASSERT_EQ(ZSTD_getFrameContentSize(compressed.data(), compressed.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  const auto entryFor = [&](uint64_t declared) {
    return RawEntry{1, 80, kFlag64Bit | kFlagZstd, compressed,
                    static_cast<uint32_t>(compressed.size()), declared};
  };
  std::vector<Entry> entries;
  std::string error;
  ASSERT_TRUE(parseContainer(makeContainer({entryFor(text.size())}), entries, error)) << error;
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].payload, ptx);
  // Without a size in the header the frames alone decide.
  ASSERT_TRUE(parseContainer(makeContainer({entryFor(0)}), entries, error)) << error;
  EXPECT_EQ(entries.back().payload, ptx);
  // A header that understates the size stops decompression at its word.
  EXPECT_FALSE(parseContainer(makeContainer({entryFor(text.size() - 10)}), entries, error));
  EXPECT_NE(error.find("more than"), std::string::npos) << error;
  EXPECT_FALSE(parseContainer(makeContainer({entryFor(text.size() + 1)}), entries, error));
  EXPECT_NE(error.find("Zstd"), std::string::npos) << error;
  EXPECT_EQ(entries.size(), 2u);
}

TEST(FatbinSynthetic, SeveralZstdFrames) {
  const std::string first = samplePtx();
  const std::string second = std::string("// more\n") + '\0';
  const std::string stored = zstdCompress(first, true) + zstdCompress(second, true);
  const RawEntry entry{1, 90, kFlag64Bit | kFlagZstd, stored, static_cast<uint32_t>(stored.size()),
                       first.size() + second.size()};
  std::vector<Entry> entries;
  std::string error;
  ASSERT_TRUE(parseContainer(makeContainer({entry}), entries, error)) << error;
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].payload, first + "// more\n");
}

TEST(FatbinSynthetic, OtherKindsAreSkippedAndEmptyContainersParse) {
  const RawEntry ltoIr{8, 90, kFlag64Bit, std::string(40, 'x')};
  const RawEntry ptx{1, 90, kFlag64Bit, samplePtx()};
  std::vector<Entry> entries;
  std::string error;
  ASSERT_TRUE(parseContainer(makeContainer({ltoIr, ptx}), entries, error)) << error;
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].kind, EntryKind::kPtx);
  EXPECT_EQ(entries[0].payload, samplePtx());
  ASSERT_TRUE(parseContainer(makeContainer({}), entries, error)) << error;
  EXPECT_EQ(entries.size(), 1u);
  // A cubin entry must hold an ELF image.
  EXPECT_FALSE(parseContainer(makeContainer({{2, 90, kFlag64Bit, "not elf"}}), entries, error));
  EXPECT_NE(error.find("sm_90"), std::string::npos) << error;
}

// ---- ELF objects and programs ----

TEST(FatbinElf, ObjectFileNvFatbinSection) {
  const Bytes object = readInput("kernels.o");
  ASSERT_FALSE(object.empty());
  EXPECT_EQ(elfImageSize(object.data()), object.size());

  const auto section = findElfSection(object, ".nv_fatbin");
  ASSERT_FALSE(section.empty());
  EXPECT_TRUE(within(section, object));
  std::vector<Entry> entries;
  std::string error;
  ASSERT_TRUE(parseContainers(section, entries, error)) << error;

  // nvcc -c embeds the same container that nvcc -fatbin writes.
  const auto reference = parseInput("kernels_default.fatbin");
  ASSERT_EQ(entries.size(), reference.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i].kind, reference[i].kind);
    EXPECT_EQ(entries[i].smArch, reference[i].smArch);
    EXPECT_TRUE(entries[i].payload == reference[i].payload) << "entry " << i;
  }

  EXPECT_TRUE(findElfSection(object, ".nv_fatbin_absent").empty());
  EXPECT_TRUE(findElfSection(object, ".nv_fatbi").empty());
  EXPECT_FALSE(findElfSection(object, ".nvFatBinSegment").empty());
}

TEST(FatbinElf, LinkedProgramHoldsOneContainerPerUnit) {
  const Bytes program = readInput("linked_program");
  const auto section = findElfSection(program, ".nv_fatbin");
  ASSERT_FALSE(section.empty());
  std::vector<Entry> all;
  std::string error;
  ASSERT_TRUE(parseContainers(section, all, error)) << error;
  std::vector<Entry> first;
  ASSERT_TRUE(parseContainer(section, first, error)) << error;
  EXPECT_LT(first.size(), all.size());

  const auto ptxContaining = [&](const char* name) {
    return std::count_if(all.begin(), all.end(), [&](const Entry& e) {
      return e.kind == EntryKind::kPtx && e.payload.find(name) != std::string::npos;
    });
  };
  EXPECT_EQ(ptxContaining("tallyAddOne"), 2) << "kernels.cu PTX for compute_80 and compute_90";
  EXPECT_EQ(ptxContaining("_Z11tallySecondPd"), 2);
}

TEST(FatbinElf, NotElf) {
  const Bytes container = readInput("kernels_none.fatbin");
  EXPECT_EQ(elfImageSize(container.data()), 0u);
  EXPECT_EQ(elfImageSize(nullptr), 0u);
  EXPECT_TRUE(findElfSection(container, ".nv_fatbin").empty());
  EXPECT_TRUE(findElfSection({}, ".nv_fatbin").empty());
}

// ---- selection ----

TEST(FatbinSelect, PicksBestEntryForDevice) {
  const auto entries = parseInput("kernels_default.fatbin");
  const Entry* sm80 = findEntry(entries, EntryKind::kCubin, 80);
  const Entry* sm90 = findEntry(entries, EntryKind::kCubin, 90);
  const Entry* ptx90 = findEntry(entries, EntryKind::kPtx, 90);
  ASSERT_TRUE(sm80 && sm90 && ptx90);
  EXPECT_EQ(selectForDevice(entries, 9, 0), sm90);
  EXPECT_EQ(selectForDevice(entries, 8, 0), sm80);
  EXPECT_EQ(selectForDevice(entries, 8, 6), sm80);
  EXPECT_EQ(selectForDevice(entries, 8, 9), sm80);
  EXPECT_EQ(selectForDevice(entries, 10, 0), ptx90) << "no cubin of major 10: JIT the newest PTX";
  EXPECT_EQ(selectForDevice(entries, 12, 0), ptx90);
  EXPECT_EQ(selectForDevice(entries, 7, 5), nullptr);
  EXPECT_EQ(selectForDevice(entries, 8, 10), nullptr);
  EXPECT_EQ(selectForDevice({}, 9, 0), nullptr);
}

TEST(FatbinSelect, ArchAndFamilySpecificVariants) {
  // Payloads carry names so failures read well.
  std::vector<Entry> entries = {
      {EntryKind::kCubin, 90, false, "sm_90"},
      {EntryKind::kCubin, 90, true, "sm_90a"},
      {EntryKind::kPtx, 100, false, "compute_100f", true},
      {EntryKind::kPtx, 90, true, "compute_90a"},
      {EntryKind::kPtx, 80, false, "compute_80"},
      {EntryKind::kCubin, 100, false, "sm_100f", true},
  };
  const auto pick = [&](int major, int minor) {
    const Entry* entry = selectForDevice(entries, major, minor);
    return entry == nullptr ? std::string("none") : entry->payload;
  };
  EXPECT_EQ(pick(9, 0), "sm_90a") << "the exact arch-specific cubin wins a tie";
  EXPECT_EQ(pick(9, 1), "sm_90") << "an 'a' cubin runs only on its exact arch";
  EXPECT_EQ(pick(10, 3), "sm_100f");
  EXPECT_EQ(pick(12, 0), "compute_80") << "'f' PTX stays in its family, 'a' PTX on its arch";
  EXPECT_EQ(pick(8, 6), "compute_80");
  entries.pop_back();
  EXPECT_EQ(pick(10, 0), "compute_100f");
  EXPECT_EQ(pick(10, 3), "compute_100f");
  EXPECT_EQ(pick(7, 0), "none");
}

// ---- module images handed to the driver API ----

TEST(ModuleImage, Wrapper) {
  const Bytes container = readInput("kernels_default.fatbin");
  const FatbinWrapper wrapper{kWrapperMagic, 1, container.data(), nullptr};
  const ModuleImage image = moduleImage(&wrapper);
  EXPECT_EQ(image.kind, ImageKind::kWrapper);
  EXPECT_EQ(image.bytes.data(), container.data());
  EXPECT_EQ(image.bytes.size(), container.size());

  std::string error;
  const auto bytes = containerFromWrapper(&wrapper, error);
  EXPECT_EQ(bytes.data(), container.data());
  EXPECT_EQ(bytes.size(), container.size());
  EXPECT_TRUE(error.empty()) << error;
  std::vector<Entry> entries;
  EXPECT_TRUE(parseContainer(bytes, entries, error)) << error;
  EXPECT_EQ(entries.size(), 4u);
}

TEST(ModuleImage, PrelinkedWrapperIsRejected) {
  const Bytes container = readInput("kernels_default.fatbin");
  const void* prelinked[] = {nullptr};
  const FatbinWrapper wrapper{kWrapperMagic, 2, container.data(), prelinked};
  std::string error;
  EXPECT_TRUE(containerFromWrapper(&wrapper, error).empty());
  EXPECT_NE(error.find("version 2"), std::string::npos) << error;
  const ModuleImage image = moduleImage(&wrapper);
  EXPECT_EQ(image.kind, ImageKind::kWrapper);
  EXPECT_TRUE(image.bytes.empty());

  WrapperView view;
  ASSERT_TRUE(readWrapper(&wrapper, view, error)) << error;
  EXPECT_EQ(view.version, 2u);
  EXPECT_EQ(view.prelinked, prelinked);
  EXPECT_EQ(view.container.size(), container.size());
}

TEST(ModuleImage, BadWrappersExplainThemselves) {
  const Bytes container = readInput("kernels_default.fatbin");
  const Bytes object = readInput("kernels.o");
  std::string error;
  const FatbinWrapper badMagic{kWrapperMagic + 1, 1, container.data(), nullptr};
  EXPECT_TRUE(containerFromWrapper(&badMagic, error).empty());
  EXPECT_FALSE(error.empty());
  error.clear();
  const FatbinWrapper badVersion{kWrapperMagic, 3, container.data(), nullptr};
  EXPECT_TRUE(containerFromWrapper(&badVersion, error).empty());
  EXPECT_FALSE(error.empty());
  error.clear();
  const FatbinWrapper noData{kWrapperMagic, 1, nullptr, nullptr};
  EXPECT_TRUE(containerFromWrapper(&noData, error).empty());
  EXPECT_FALSE(error.empty());
  error.clear();
  const FatbinWrapper notContainer{kWrapperMagic, 1, object.data(), nullptr};
  EXPECT_TRUE(containerFromWrapper(&notContainer, error).empty());
  EXPECT_FALSE(error.empty());
  error.clear();
  EXPECT_TRUE(containerFromWrapper(nullptr, error).empty());
  EXPECT_FALSE(error.empty());
}

TEST(ModuleImage, Container) {
  Bytes bytes = readInput("kernels_speed.fatbin");
  const size_t size = bytes.size();
  bytes.resize(size + 100, 0xee);  // whatever follows the container is not part of it
  const ModuleImage image = moduleImage(bytes.data());
  EXPECT_EQ(image.kind, ImageKind::kContainer);
  EXPECT_EQ(image.bytes.data(), bytes.data());
  EXPECT_EQ(image.bytes.size(), size);
}

TEST(ModuleImage, Cubin) {
  const auto entries = parseInput("kernels_none.fatbin");
  const Entry* cubin = findEntry(entries, EntryKind::kCubin, 90);
  ASSERT_NE(cubin, nullptr);
  const auto* data = reinterpret_cast<const uint8_t*>(cubin->payload.data());
  const ModuleImage image = moduleImage(data);
  EXPECT_EQ(image.kind, ImageKind::kCubin);
  EXPECT_EQ(image.bytes.data(), data);
  EXPECT_EQ(image.bytes.size(), elfImageSize(data));
  EXPECT_GT(image.bytes.size(), 0u);

  const Bytes object = readInput("kernels.o");
  EXPECT_EQ(moduleImage(object.data()).bytes.size(), object.size());
}

TEST(ModuleImage, Ptx) {
  const auto entries = parseInput("kernels_default.fatbin");
  const Entry* ptx = findEntry(entries, EntryKind::kPtx, 80);
  ASSERT_NE(ptx, nullptr);
  const ModuleImage image = moduleImage(ptx->payload.c_str());
  EXPECT_EQ(image.kind, ImageKind::kPtx);
  EXPECT_EQ(image.bytes.size(), ptx->payload.size() + 1) << "the NUL terminator is included";
  EXPECT_EQ(image.bytes.back(), 0);
}

TEST(ModuleImage, Unknown) {
  EXPECT_EQ(moduleImage(nullptr).kind, ImageKind::kUnknown);
  EXPECT_EQ(moduleImage("").kind, ImageKind::kUnknown);
  EXPECT_EQ(moduleImage("plain text without a version directive").kind, ImageKind::kUnknown);
  EXPECT_EQ(moduleImage("\x7f" "EL").kind, ImageKind::kUnknown);
  const uint8_t binary[] = {0x01, 0x02, 0x03, '.', 'v', 'e', 'r', 's', 'i', 'o', 'n', 0};
  EXPECT_EQ(moduleImage(binary).kind, ImageKind::kUnknown);
  EXPECT_TRUE(moduleImage(binary).bytes.empty());
}

// ---- untrusted input ----

// Every strict prefix of a container is missing something the header promises.
TEST(FatbinRobustness, EveryPrefixFails) {
  for (const char* mode : kCompressModes) {
    const Bytes whole = readInput(std::string("kernels_") + mode + ".fatbin");
    ASSERT_FALSE(whole.empty());
    for (size_t length = 0; length < whole.size(); ++length) {
      const Bytes prefix(whole.begin(), whole.begin() + length);  // exact size: ASan sees overreads
      std::vector<Entry> entries;
      std::string error;
      ASSERT_FALSE(parseContainer(prefix, entries, error)) << mode << " prefix " << length;
      ASSERT_FALSE(error.empty());
      error.clear();
      ASSERT_FALSE(parseContainers(prefix, entries, error)) << mode << " prefix " << length;
      ASSERT_FALSE(error.empty());
      ASSERT_TRUE(entries.empty());
    }
  }
}

// Prefixes whose container header is patched to match their length, so the parser has to walk
// the entries and find the cut itself. A cut exactly between entries is a valid, shorter
// container.
TEST(FatbinRobustness, EveryTruncatedBodyFails) {
  for (const char* mode : kCompressModes) {
    const Bytes whole = readInput(std::string("kernels_") + mode + ".fatbin");
    const auto boundaries = entryOffsets(whole);
    ASSERT_EQ(boundaries.size(), 4u);
    for (size_t length = 16; length < whole.size(); ++length) {
      Bytes prefix(whole.begin(), whole.begin() + length);
      store<uint64_t>(prefix, 8, length - 16);
      std::vector<Entry> entries;
      std::string error;
      const auto boundary = std::find(boundaries.begin(), boundaries.end(), length);
      if (boundary != boundaries.end()) {
        ASSERT_TRUE(parseContainer(prefix, entries, error)) << mode << " " << length << error;
        ASSERT_EQ(entries.size(), static_cast<size_t>(boundary - boundaries.begin()));
      } else {
        ASSERT_FALSE(parseContainer(prefix, entries, error)) << mode << " prefix " << length;
        ASSERT_FALSE(error.empty());
        ASSERT_TRUE(entries.empty());
      }
    }
  }
}

TEST(FatbinRobustness, RandomByteFlipsNeverCrash) {
  std::mt19937 random(20240611);
  for (const char* mode : kCompressModes) {
    const Bytes original = readInput(std::string("kernels_") + mode + ".fatbin");
    ASSERT_FALSE(original.empty());
    int failures = 0;
    constexpr int kRounds = 1500;
    for (int round = 0; round < kRounds; ++round) {
      Bytes bytes = original;
      const int flips = 1 + static_cast<int>(random() % 4);
      for (int i = 0; i < flips; ++i) {
        // Half the flips land in the container and first entry headers, where they matter most.
        const size_t span = (round % 2 == 0) ? std::min<size_t>(96, bytes.size()) : bytes.size();
        bytes[random() % span] ^= static_cast<uint8_t>(1 + random() % 255);
      }
      std::vector<Entry> entries;
      std::string error;
      if (parseContainers(bytes, entries, error)) {
        for (const Entry& entry : entries) {
          ASSERT_TRUE(entry.kind == EntryKind::kPtx || entry.kind == EntryKind::kCubin);
          if (entry.kind == EntryKind::kCubin) {
            ASSERT_TRUE(hasElfMagic(entry.payload));
          }
        }
      } else {
        ++failures;
        ASSERT_FALSE(error.empty());
        ASSERT_TRUE(entries.empty());
      }
    }
    EXPECT_GT(failures, kRounds / 4) << mode << ": corruption should mostly be detected";
  }
}

class TargetedCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    size_ = readInput("kernels_size.fatbin");
    speed_ = readInput("kernels_speed.fatbin");
    ASSERT_FALSE(size_.empty());
    ASSERT_FALSE(speed_.empty());
    sizeEntries_ = entryOffsets(size_);
    speedEntries_ = entryOffsets(speed_);
    ASSERT_EQ(sizeEntries_.size(), 4u);
    ASSERT_EQ(speedEntries_.size(), 4u);
  }

  // The parse must fail, explain why, and mention `expected` in the explanation.
  static void expectRejected(const Bytes& bytes, const std::string& expected) {
    std::vector<Entry> entries;
    std::string error;
    EXPECT_FALSE(parseContainer(bytes, entries, error)) << "expected: " << expected;
    EXPECT_NE(error.find(expected), std::string::npos) << error;
    EXPECT_TRUE(entries.empty());
  }

  Bytes size_;
  Bytes speed_;
  std::vector<size_t> sizeEntries_;
  std::vector<size_t> speedEntries_;
};

TEST_F(TargetedCorruption, ContainerHeader) {
  Bytes bytes = size_;
  bytes[0] ^= 1;
  expectRejected(bytes, "magic");
  bytes = size_;
  store<uint16_t>(bytes, 4, 2);
  expectRejected(bytes, "version");
  bytes = size_;
  store<uint16_t>(bytes, 6, 8);
  expectRejected(bytes, "header size");
  bytes = size_;
  store<uint64_t>(bytes, 8, load<uint64_t>(bytes, 8) + 8);
  expectRejected(bytes, "claims");
  bytes = size_;
  store<uint64_t>(bytes, 8, ~uint64_t{0});
  expectRejected(bytes, "claims");
  bytes = size_;
  store<uint64_t>(bytes, 8, load<uint64_t>(bytes, 8) - 8);
  expectRejected(bytes, "overruns");
}

TEST_F(TargetedCorruption, EntryHeader) {
  const size_t entry = sizeEntries_[0];
  Bytes bytes = size_;
  store<uint32_t>(bytes, entry + kHeaderSizeField, 0);
  expectRejected(bytes, "entry header size");
  bytes = size_;
  store<uint32_t>(bytes, entry + kHeaderSizeField, 0xffffffffu);
  expectRejected(bytes, "entry header size");
  bytes = size_;
  store<uint64_t>(bytes, entry + kPayloadSizeField, uint64_t{1} << 62);
  expectRejected(bytes, "overruns");
  bytes = size_;
  store<uint32_t>(bytes, entry + kCompressedSizeField,
                  static_cast<uint32_t>(load<uint64_t>(bytes, entry + kPayloadSizeField) + 1));
  expectRejected(bytes, "exceeds payload size");
  bytes = size_;
  store<uint64_t>(bytes, entry + kFlagsField, load<uint64_t>(bytes, entry + kFlagsField) | kFlagLz4);
  expectRejected(bytes, "both");
  bytes = size_;
  store<uint64_t>(bytes, entry + kFlagsField, load<uint64_t>(bytes, entry + kFlagsField) & ~kFlagZstd);
  expectRejected(bytes, "not an ELF");
}

TEST_F(TargetedCorruption, ZstdPayload) {
  const size_t entry = sizeEntries_[0];
  const size_t payload = entry + load<uint32_t>(size_, entry + kHeaderSizeField);
  Bytes bytes = size_;
  store<uint64_t>(bytes, entry + kUncompressedSizeField,
                  load<uint64_t>(bytes, entry + kUncompressedSizeField) + 1);
  expectRejected(bytes, "header says");
  bytes = size_;
  store<uint64_t>(bytes, entry + kUncompressedSizeField, uint64_t{1} << 40);
  expectRejected(bytes, "too large");
  bytes = size_;
  bytes[payload] ^= 0xff;  // Zstd frame magic
  expectRejected(bytes, "Zstd");
  bytes = size_;
  store<uint32_t>(bytes, entry + kCompressedSizeField,
                  load<uint32_t>(bytes, entry + kCompressedSizeField) - 1);
  expectRejected(bytes, "Zstd");
}

TEST_F(TargetedCorruption, Lz4Payload) {
  // Entry 1 is the compute_80 PTX, the only LZ4-compressed kind in "speed" mode.
  const size_t entry = speedEntries_[1];
  ASSERT_EQ(load<uint16_t>(speed_, entry), static_cast<uint16_t>(EntryKind::kPtx));
  ASSERT_TRUE(load<uint64_t>(speed_, entry + kFlagsField) & kFlagLz4);
  Bytes bytes = speed_;
  store<uint64_t>(bytes, entry + kUncompressedSizeField,
                  load<uint64_t>(bytes, entry + kUncompressedSizeField) + 1);
  expectRejected(bytes, "LZ4");
  bytes = speed_;
  store<uint64_t>(bytes, entry + kUncompressedSizeField, 0);
  expectRejected(bytes, "LZ4");
  bytes = speed_;
  store<uint64_t>(bytes, entry + kUncompressedSizeField, uint64_t{1} << 29);
  expectRejected(bytes, "cannot expand");
  bytes = speed_;
  store<uint32_t>(bytes, entry + kCompressedSizeField,
                  load<uint32_t>(bytes, entry + kCompressedSizeField) - 1);
  expectRejected(bytes, "LZ4");
}

TEST(FatbinElfRobustness, PrefixesAndFlipsStayInBounds) {
  const Bytes object = readInput("kernels.o");
  ASSERT_FALSE(object.empty());
  int found = 0;
  for (size_t length = 0; length <= object.size(); ++length) {
    const Bytes prefix(object.begin(), object.begin() + length);
    const auto section = findElfSection(prefix, ".nv_fatbin");
    ASSERT_TRUE(within(section, prefix)) << length;
    found += section.empty() ? 0 : 1;
  }
  // The section header table sits at the end of the object, so only the whole file works.
  EXPECT_EQ(found, 1);

  std::mt19937 random(7);
  for (int round = 0; round < 3000; ++round) {
    Bytes bytes = object;
    for (int i = 0; i < 3; ++i) {
      // Aim at the ELF header and the section header table, which drive every read.
      const size_t table = load<uint64_t>(object, 0x28);
      const size_t position = (round % 2 == 0) ? random() % 64
                                               : table + random() % (object.size() - table);
      bytes[position] ^= static_cast<uint8_t>(1 + random() % 255);
    }
    const auto section = findElfSection(bytes, ".nv_fatbin");
    ASSERT_TRUE(within(section, bytes)) << round;
    std::vector<Entry> entries;
    std::string error;
    if (!parseContainers(section, entries, error)) {
      ASSERT_FALSE(error.empty());
    }
  }
}

}  // namespace
}  // namespace tally::fatbin
