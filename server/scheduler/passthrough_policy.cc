// "passthrough": every launch goes straight to the tenant's stream, untouched: the behaviour
// of a shared context without a scheduler, and the baseline the priority policy is measured
// against.
#include "server/scheduler/passthrough_policy.h"

namespace tally::server::scheduler {

CUresult PassthroughPolicy::launch(const KernelLaunch& k) {
  ParameterPointers params(k);
  return launcher_.launchOriginal(k, params.get());
}

}  // namespace tally::server::scheduler
