// ParameterPointers (policy.h): kept with the policies, which the scheduler tests link without
// the driver.
#include "server/scheduler/policy.h"

namespace tally::server::scheduler {

ParameterPointers::ParameterPointers(const KernelLaunch& k)
    : pointers_(k.paramPointers), count_(k.paramLayout != nullptr ? k.paramLayout->size() : 0) {
  if (pointers_ != nullptr) return;
  if (count_ > inline_.size()) many_.resize(count_);
  pointers_ = many_.empty() ? inline_.data() : many_.data();
  for (size_t i = 0; i < count_; ++i) {
    pointers_[i] = const_cast<uint8_t*>(k.paramBuffer.data()) + (*k.paramLayout)[i].first;
  }
}

}  // namespace tally::server::scheduler
