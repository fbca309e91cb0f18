// The module tallyd compiles for a client module with PTX: the original kernels plus variants,
// of one family per tenant class. Best-effort tenants get each eligible kernel's sliced and
// (where the barrier-aware rewrite allows) PTB variant; high-priority tenants its chained
// variant (chain.h). Loading it instead of the client's own image keeps one set of __device__
// globals shared by the original and the variants, so the variants see and change exactly what
// the original would.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::server::transform {

// Bumped whenever the output of any transform changes: it is part of every cache key, so a new
// tallyd never loads variants an older transformer made.
inline constexpr uint32_t kTransformerVersion = 4;

enum class VariantFamily {
  kBestEffort,    // sliced + PTB: best-effort kernels that can be stopped at a block boundary
  kHighPriority,  // chained: high-priority kernels whose blocks are queued ahead
};

// The variant name tallyd's cache files record for a family ("sliced+ptb", "chained").
const char* familyName(VariantFamily family);

struct VariantModule {
  bool ok = false;      // false: nothing to compile (`error` says why: unparseable, no eligible kernel)
  std::string ptx;      // the printed module
  int sliced = 0;       // variants added
  int ptb = 0;
  int chained = 0;
  std::vector<std::string> skipped;  // "kernel: reason", per variant kind
  std::string error;
};

VariantModule buildVariantModule(std::string_view ptx, VariantFamily family);

}  // namespace tally::server::transform
