// "passthrough": every launch goes straight to the tenant's stream, untouched: the behaviour
// of a shared context without a scheduler, and the baseline the priority policy is measured
// against.
#include "server/scheduler/passthrough_policy.h"

namespace tally::server::scheduler {

CUresult PassthroughPolicy::launch(const KernelLaunch& k) {
  ParameterPointers params(k);
  return launcher_.launchOriginal(k, params.get());
}

ParameterPointers::ParameterPointers(const KernelLaunch& k)
    : pointers_(k.paramPointers), count_(k.paramLayout != nullptr ? k.paramLayout->size() : 0) {
  if (pointers_ != nullptr) return;
  built_.reserve(count_);
  for (size_t i = 0; i < count_; ++i) {
    built_.push_back(const_cast<uint8_t*>(k.paramBuffer.data()) + (*k.paramLayout)[i].first);
  }
  pointers_ = built_.data();
}

}  // namespace tally::server::scheduler
