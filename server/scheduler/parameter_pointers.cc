// ParameterPointers (policy.h): kept with the policies, which the scheduler tests link without
// the driver.
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

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
