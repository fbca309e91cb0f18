// On-disk cache of compiled kernel variants: one file per VariantKey holding the cubin that
// nvJitLink made from a transformed module's PTX. See docs/transform.md ("Compiled-variant cache").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "common/hash/content_hash.h"

namespace tally::server::transform {

// Everything a cached cubin depends on. Any field changing gives another file.
struct VariantKey {
  hash::ContentHash ptxHash{};      // SHA-256 of the original module's PTX
  std::string variant;              // the family: "sliced+ptb" | "chained" (variant_module.h)
  uint32_t transformerVersion = 0;  // bumped whenever a transform's output changes
  int driverVersion = 0;            // cuDriverGetVersion() of the host
  std::string arch;                 // "sm_90"

  // Canonical byte encoding of every field (little-endian, strings length-prefixed): what the
  // file name is hashed from and what an entry's header echoes.
  std::string encode() const;
  // Stable, filesystem-safe name: 64 hex digits of SHA-256(encode()) + ".tvc".
  std::string fileName() const;

  bool operator==(const VariantKey&) const = default;
};

// Entry layout (little-endian):
//   magic "TALLYVC1" | u32 key length | key (VariantKey::encode) | u64 payload length |
//   32-byte SHA-256 of the payload | payload
// Entries are written to a temporary file in the same directory and renamed into place, so a
// reader sees either no file, an old complete file or a new complete file. Several threads
// (and processes) may find and store concurrently; stores of the same key race harmlessly
// (the last rename wins, every candidate is complete). A file that is short, has trailing
// bytes, a wrong magic, another key or a wrong checksum is a miss.
class VariantCache {
 public:
  explicit VariantCache(std::filesystem::path dir);

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path pathFor(const VariantKey& key) const { return dir_ / key.fileName(); }

  // The cached cubin, or nullopt when there is none or the entry is damaged. Never throws.
  std::optional<std::string> find(const VariantKey& key) const;

  // Writes the entry (creating the directory, mode 0700, if missing). On failure returns false
  // with `error` naming the path and the reason. Never throws.
  bool store(const VariantKey& key, std::string_view cubin, std::string& error) const;

  // Creates the directory (and missing parents) with mode 0700 if missing. Never throws.
  bool ensureDirectory(std::string& error) const;

  // Largest payload accepted (a larger file is treated as damaged rather than read).
  static constexpr uint64_t kMaxPayload = uint64_t(1) << 30;

 private:
  std::filesystem::path dir_;
};

}  // namespace tally::server::transform
