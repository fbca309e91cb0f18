// "passthrough": every launch goes straight to the tenant's stream, untouched: the behaviour
// of a shared context without a scheduler, and the baseline the priority policy is measured
// against.
#include "server/scheduler/passthrough_policy.h"

namespace tally::server::scheduler {

CUresult PassthroughPolicy::launch(const KernelLaunch& k) {
  std::vector<void*> built;
  void** params = k.paramPointers;
  if (params == nullptr) {
    built = parameterPointers(k);
    params = built.data();
  }
  return launcher_.launchOriginal(k, params);
}

std::vector<void*> parameterPointers(const KernelLaunch& k) {
  std::vector<void*> pointers;
  pointers.reserve(k.paramLayout->size());
  for (auto [offset, size] : *k.paramLayout) {
    pointers.push_back(const_cast<uint8_t*>(k.paramBuffer.data()) + offset);
  }
  return pointers;
}

}  // namespace tally::server::scheduler
