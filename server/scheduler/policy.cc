// makePolicy: the configured policy on the driver (the tests build theirs on a fake launcher).
#include "server/scheduler/policy.h"

#include "server/scheduler/launcher.h"
#include "server/scheduler/passthrough_policy.h"
#include "server/scheduler/priority_policy.h"
#include "server/scheduler/stress_policy.h"

namespace tally::server::scheduler {

std::unique_ptr<Policy> makePolicy(const SchedulerConfig& config, const std::vector<gpu::Gpu*>& gpus,
                                   std::string& error) {
  std::unique_ptr<Policy> policy;
  if (config.policy == "passthrough") {
    if (config.smPartition) {
      error = "SM partitions (--sm-partition, priority_sm_partition) need the priority policy";
      return nullptr;
    }
    policy = std::make_unique<PassthroughPolicy>(driverLauncher());
  } else if (config.policy == "priority") {
    policy = std::make_unique<PriorityPolicy>(config, gpus, driverLauncher(), steadyClock(), error);
    if (!error.empty()) return nullptr;
  } else {
    error = "unknown scheduler policy \"" + config.policy + "\" (expected \"passthrough\" or \"priority\")";
    return nullptr;
  }
  if (config.stress) return std::make_unique<StressPolicy>(std::move(policy), driverLauncher(), config.stressSeed);
  return policy;
}

}  // namespace tally::server::scheduler
