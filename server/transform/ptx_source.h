// Finding the PTX in what the tool (and later tallyd) is given: PTX text, a fatbin, or an ELF
// object/executable whose .nv_fatbin section holds fatbins.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tally::server::transform {

struct PtxImage {
  uint32_t smArch = 0;  // 0 for plain PTX text (read its .target)
  std::string name;     // "compute_90" or "ptx"
  std::string text;
};

struct PtxSourceResult {
  bool ok = false;
  std::vector<PtxImage> images;  // every PTX found, in file order
  std::string error;
};

// Bounds-checked: the bytes are untrusted. Fails if nothing in them is PTX.
PtxSourceResult findPtx(std::span<const uint8_t> bytes);

// The image with the highest arch, or the one whose arch is `smArch` (nullptr if absent).
const PtxImage* choosePtx(const std::vector<PtxImage>& images, uint32_t smArch = 0);

}  // namespace tally::server::transform
