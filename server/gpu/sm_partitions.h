// SM partitions of one GPU (green contexts of tallyd's primary context): a partition for
// high-priority (HP) tenants and one of the remaining SMs for best-effort (BE) tenants, so that
// BE blocks, however long, never occupy the SMs HP needs next. Green contexts are views of the
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

namespace tally::server::gpu {

// Where a stream's work runs.
enum class Placement : uint8_t {
  kWholeGpu,      // the primary context: every SM
  kHpPartition,   // the HP partition's SMs
  kBePartition,   // the SMs the HP partition leaves
};
inline constexpr size_t kPlacements = 3;
inline size_t placementIndex(Placement p) { return static_cast<size_t>(p); }

struct SmPartitionSpec {
  unsigned hpSms = 0;      // SMs reserved for HP (rounded up by the driver to its granularity) ...
  unsigned hpPercent = 0;  // ... or this share of the device's SMs, when set ("30%")
  unsigned hpSmsOf(unsigned deviceSms) const {
    return hpPercent == 0 ? hpSms : std::max(1u, (deviceSms * hpPercent + 50) / 100);
  }
  // HP's partition spans every SM (it only stops being time-sliced with BE's partition); BE
  // still gets the SMs hpSms leaves.
  bool overlap = false;
};

// "off" (nullopt, no error), "N", "P%" (1-99 % of the device's SMs), each optionally followed by
// ":overlap"; nullopt with `error` for anything else.
std::optional<SmPartitionSpec> parseSmPartitionSpec(std::string_view text, std::string& error);

class SmPartitions {
 public:
  // Splits `device`'s SMs as `spec` says; nullptr with `error` when the driver cannot (no green
  // contexts, too many SMs asked). The device's primary context must be current.
  static std::unique_ptr<SmPartitions> create(CUdevice device, SmPartitionSpec spec, std::string& error);
  ~SmPartitions();
  SmPartitions(const SmPartitions&) = delete;
  SmPartitions& operator=(const SmPartitions&) = delete;

  // A non-blocking stream of `priority` in placement `p` (kWholeGpu: in the current context).
  CUresult createStream(Placement p, int priority, CUstream& out) const;
  unsigned smCount(Placement p) const;

 private:
  SmPartitions() = default;
  CUgreenCtx hp_ = nullptr;
  CUgreenCtx be_ = nullptr;
  unsigned allSms_ = 0, hpSms_ = 0, beSms_ = 0;
};

}  // namespace tally::server::gpu
