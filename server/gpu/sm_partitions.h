// SM partitions of one GPU (green contexts of tallyd's primary context): a partition for
// high-priority (HP) tenants and one of the remaining SMs for best-effort (BE) tenants, so that
// BE blocks, however long, never occupy the SMs HP needs next; one such pair per reserve size
// (level), made at startup, for the scheduler to choose between. Green contexts are views of the
// primary context: the modules, memory and events of the shared context work in them unchanged
// (bench/micro/green_ctx_probe verifies this on the GPU), so a tenant's stream can move between
// the whole GPU and a partition at any point of its work (session/stream_table.h, place()).
#pragma once

#include <algorithm>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tally::server::gpu {

// How many reserve sizes one GPU's partitions may have (the controller's levels).
inline constexpr size_t kMaxPartitionLevels = 4;

// Where a stream's work runs: every SM, or one side of one partition level (level i splits the
// SMs at the i-th reserve size of SmPartitionSpec).
struct Placement {
  enum class Side : uint8_t { kWholeGpu, kHp, kBe };
  Side side = Side::kWholeGpu;
  uint8_t level = 0;  // kHp / kBe only

  static constexpr Placement wholeGpu() { return {}; }
  static constexpr Placement hp(uint8_t level) { return {Side::kHp, level}; }
  static constexpr Placement be(uint8_t level) { return {Side::kBe, level}; }
  friend constexpr bool operator==(Placement a, Placement b) {
    return a.side == b.side && (a.side == Side::kWholeGpu || a.level == b.level);
  }
};
inline constexpr size_t kPlacements = 1 + 2 * kMaxPartitionLevels;
inline size_t placementIndex(Placement p) {
  return p.side == Placement::Side::kWholeGpu ? 0 : 1 + 2 * size_t(p.level) + (p.side == Placement::Side::kBe ? 1 : 0);
}

// One level: the SMs kept free of BE work for HP.
struct SmReserve {
  unsigned size = 0;  // SMs (rounded up by the driver to its granularity), or percent of them
  // HP's partition spans every SM (it only stops being time-sliced with BE's partition; BE still
  // gets the SMs the reserve leaves): HP's blocks may also use SMs whose BE blocks have ended.
  bool overlap = false;
};

// The levels in increasing strength: a larger reserve, or at the same size one without overlap,
// bounds HP better (HP never waits behind a BE block) and leaves BE the same or less.
struct SmPartitionSpec {
  std::vector<SmReserve> reserves;
  bool percent = false;  // sizes are shares of the device's SMs ("10%,30%")

  size_t levels() const { return reserves.size(); }
  unsigned hpSmsOf(unsigned deviceSms, size_t level) const {
    const unsigned v = reserves.at(level).size;
    return percent ? std::max(1u, (deviceSms * v + 50) / 100) : v;
  }
};

// "off" (nullopt, no error), or up to kMaxPartitionLevels levels in increasing strength
// separated by commas, each "N" (SMs) or, for all of them, "P%" (1-99 % of the device's SMs),
// optionally followed by ":overlap" ("24:overlap,40:overlap,40,64"); nullopt with `error` for
// anything else.
std::optional<SmPartitionSpec> parseSmPartitionSpec(std::string_view text, std::string& error);

class SmPartitions {
 public:
  // Splits `device`'s SMs at every level of `spec`; nullptr with `error` when the driver cannot
  // (no green contexts, too many SMs asked). The device's primary context must be current.
  static std::unique_ptr<SmPartitions> create(CUdevice device, SmPartitionSpec spec, std::string& error);
  ~SmPartitions();
  SmPartitions(const SmPartitions&) = delete;
  SmPartitions& operator=(const SmPartitions&) = delete;

  // A non-blocking stream of `priority` in placement `p` (the whole GPU: in the current context).
  CUresult createStream(Placement p, int priority, CUstream& out) const;
  unsigned smCount(Placement p) const;  // 0 for a level that does not exist
  size_t levels() const { return levels_.size(); }

 private:
  struct Level {
    CUgreenCtx hp = nullptr;  // null with overlap: HP uses everySm_
    CUgreenCtx be = nullptr;
    unsigned hpSms = 0, beSms = 0;
  };
  SmPartitions() = default;
  const Level* level(Placement p) const;
  bool addLevel(CUdevice device, CUdevResource& all, unsigned hpSms, bool overlap, std::string& error);
  CUgreenCtx everySm_ = nullptr;  // HP's green context at levels with overlap
  std::vector<Level> levels_;
  unsigned allSms_ = 0;
};

}  // namespace tally::server::gpu
