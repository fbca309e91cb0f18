// Cubins: a defined data symbol (STT_OBJECT, or a type this code does not know), or a
// .nv.global section. PTX: a data directive at module scope, outside every function body and
// parameter list (kernel parameters carry `.ptr .global` attributes that are not data).
#include "common/fatbin/module_data.h"

#include "common/fatbin/fatbin.h"

#include <elf.h>

#include <array>
#include <cstring>
#include <string_view>

namespace tally::fatbin {
namespace {

bool isElf(std::span<const uint8_t> image) {
  return image.size() >= SELFMAG && std::memcmp(image.data(), ELFMAG, SELFMAG) == 0;
}

bool isDataSymbolType(unsigned type) {
  return type != STT_NOTYPE && type != STT_FUNC && type != STT_SECTION && type != STT_FILE;
}

bool symbolTableDeclaresData(std::span<const uint8_t> table, uint64_t entrySize) {
  if (entrySize < sizeof(Elf64_Sym)) return true;
  for (size_t offset = 0; entrySize <= table.size() - offset; offset += entrySize) {
    Elf64_Sym symbol;
    std::memcpy(&symbol, table.data() + offset, sizeof symbol);
    // Undefined ones (the driver's reserved shared memory offset) are not this module's.
    if (symbol.st_shndx != SHN_UNDEF && isDataSymbolType(ELF64_ST_TYPE(symbol.st_info))) return true;
  }
  return false;
}

bool cubinDeclaresData(std::span<const uint8_t> image) {
  bool data = false;
  bool wellFormed = forEachElfSection(image, [&](const ElfSection& section) {
    if (section.name.starts_with(".nv.global") && section.size > 0) data = true;
    if (section.type == SHT_SYMTAB && symbolTableDeclaresData(section.bytes, section.entrySize)) data = true;
    return !data;
  });
  return data || !wellFormed;
}

constexpr std::array<std::string_view, 6> kPtxDataDirectives = {".global", ".const",   ".tex",
                                                                 ".texref", ".surfref", ".samplerref"};

bool isPtxDataDirective(std::string_view token) {
  for (std::string_view directive : kPtxDataDirectives) {
    if (token == directive) return true;
  }
  return false;
}

bool isTokenChar(char c) {
  return c == '.' || c == '_' || c == '$' || c == '%' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
         (c >= 'A' && c <= 'Z');
}

// Skips a comment starting at `i` (returns the index after it), or returns `i` if none starts.
size_t skipComment(std::string_view text, size_t i) {
  if (text.compare(i, 2, "//") == 0) {
    size_t end = text.find('\n', i);
    return end == std::string_view::npos ? text.size() : end;
  }
  if (text.compare(i, 2, "/*") == 0) {
    size_t end = text.find("*/", i + 2);
    return end == std::string_view::npos ? text.size() : end + 2;
  }
  return i;
}

bool ptxDeclaresData(std::string_view text) {
  int braces = 0, parens = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (size_t after = skipComment(text, i); after != i) {
      i = after;
      continue;
    }
    char c = text[i];
    if (c == '"') {  // .file "name"
      size_t end = text.find('"', i + 1);
      i = end == std::string_view::npos ? text.size() : end + 1;
      continue;
    }
    if (c == '{') ++braces;
    if (c == '}') --braces;
    if (c == '(') ++parens;
    if (c == ')') --parens;
    if (!isTokenChar(c)) {
      ++i;
      continue;
    }
    size_t start = i;
    while (i < text.size() && isTokenChar(text[i])) ++i;
    if (braces == 0 && parens == 0 && isPtxDataDirective(text.substr(start, i - start))) return true;
  }
  return false;
}

}  // namespace

bool declaresModuleData(std::span<const uint8_t> image) {
  if (isElf(image)) return cubinDeclaresData(image);
  std::string_view text(reinterpret_cast<const char*>(image.data()), image.size());
  if (text.find(".version") == std::string_view::npos) return true;  // neither cubin nor PTX
  return ptxDeclaresData(text);
}

}  // namespace tally::fatbin
