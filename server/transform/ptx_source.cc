#include "server/transform/ptx_source.h"

#include <cstring>

#include "common/fatbin/fatbin.h"

namespace tally::server::transform {
namespace {

bool isElf(std::span<const uint8_t> bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0;
}

bool isContainer(std::span<const uint8_t> bytes) {
  uint32_t magic = 0;
  if (bytes.size() < sizeof magic) return false;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  return magic == fatbin::kContainerMagic;
}

// PTX is printable text; a NUL-free prefix that mentions .version is good enough to tell it
// from other binaries (the parser does the real checking).
bool looksLikePtx(std::span<const uint8_t> bytes) {
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!text.empty() && text.back() == '\0') text.remove_suffix(1);
  return text.find('\0') == std::string_view::npos && text.find(".version") != std::string_view::npos;
}

PtxSourceResult fromContainers(std::span<const uint8_t> bytes) {
  PtxSourceResult result;
  std::vector<fatbin::Entry> entries;
  if (!fatbin::parseContainers(bytes, entries, result.error)) return result;
  for (const fatbin::Entry& e : entries) {
    if (e.kind != fatbin::EntryKind::kPtx) continue;
    result.images.push_back(PtxImage{e.smArch, fatbin::entryName(e), e.payload});
  }
  if (result.images.empty()) {
    result.error = "the fatbin holds no PTX (only cubins)";
    return result;
  }
  result.ok = true;
  return result;
}

}  // namespace

PtxSourceResult findPtx(std::span<const uint8_t> bytes) {
  if (isElf(bytes)) {
    std::span<const uint8_t> section = fatbin::findElfSection(bytes, ".nv_fatbin");
    if (section.empty()) {
      PtxSourceResult result;
      result.error = "ELF file without a .nv_fatbin section (a cubin holds no PTX)";
      return result;
    }
    return fromContainers(section);
  }
  if (isContainer(bytes)) return fromContainers(bytes);
  PtxSourceResult result;
  if (!looksLikePtx(bytes)) {
    result.error = "neither PTX text, a fatbin nor an ELF file";
    return result;
  }
  std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  result.images.push_back(PtxImage{0, "ptx", std::move(text)});
  result.ok = true;
  return result;
}

const PtxImage* choosePtx(const std::vector<PtxImage>& images, uint32_t smArch) {
  const PtxImage* best = nullptr;
  for (const PtxImage& image : images) {
    if (smArch != 0 && image.smArch == smArch) return &image;
    if (smArch == 0 && (best == nullptr || image.smArch > best->smArch)) best = &image;
  }
  return best;
}

}  // namespace tally::server::transform
