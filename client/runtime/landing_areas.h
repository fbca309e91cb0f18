// Where a small device-to-host copy into pageable memory lands (Unix-socket clients): a few
// areas of a memfd region tallyd maps and registers with the driver. The GPU copies into an
// area as into any pinned memory the client shares, and the waiting thread copies the bytes
// out: no staging buffer in tallyd and no reply carrying them (client/api/memory.cc).
#pragma once

#include "client/runtime/shared_memfd.h"
#include "client/transport/free_slots.h"

#include <cstddef>
#include <memory>

namespace tally::client {

class LandingAreas {
 public:
  static constexpr unsigned kAreas = 16;
  static constexpr size_t kAreaBytes = 16u << 10;  // copies up to this size land here

  // Maps the region (one call to tallyd); nullptr when memory cannot be shared with its GPU.
  static std::unique_ptr<LandingAreas> open(const MapSharedRegion& mapRegion);

  // An area held by one copy at a time; empty when every area is taken.
  FreeSlots::Lease take() { return free_.take(); }
  char* data(const FreeSlots::Lease& area) const { return region_ + area.index() * kAreaBytes; }

 private:
  explicit LandingAreas(char* region) : region_(region) {}

  char* region_;
  FreeSlots free_{kAreas};
};

}  // namespace tally::client
