#include "client/runtime/landing_areas.h"

namespace tally::client {

std::unique_ptr<LandingAreas> LandingAreas::open(const MapSharedRegion& mapRegion) {
  void* region = nullptr;
  uint64_t serverAddress = 0;
  if (mapRegion(kAreas * kAreaBytes, region, serverAddress) != CUDA_SUCCESS) return nullptr;
  if (serverAddress == 0) return nullptr;  // not registered there: the GPU cannot copy into it
  return std::unique_ptr<LandingAreas>(new LandingAreas(static_cast<char*>(region)));
}

}  // namespace tally::client
