// Eligibility analysis: which kernels (.entry) the transforms may rewrite, and why not.
#pragma once

#include <string>
#include <vector>

#include "server/transform/ptx.h"

namespace tally::server::transform {

struct Eligibility {
  std::string kernel;
  bool eligible = false;  // for every variant unless ptbEligible says otherwise
  std::string reason;     // empty when eligible
  // The PTB variant also needs the barrier-aware rewrite to be safe (ptb.h: ptbObstacle).
  // Only meaningful when `eligible`.
  bool ptbEligible = false;
  std::string ptbReason;  // empty when ptbEligible
  // It, or a function it calls, uses griddepcontrol: it orders itself against the kernels
  // around it (programmatic dependent launch). Found whatever else makes it ineligible.
  bool usesGridDependency = false;
};

// One result per .entry with a body, in module order.
std::vector<Eligibility> analyzeModule(const Module& module);

// The same for one kernel of `module` (which must be one of its functions).
Eligibility analyzeKernel(const Module& module, const Function& kernel);

// The sm number of the module's `.target sm_XX` (0 if none is found).
unsigned targetArch(const Module& module);

}  // namespace tally::server::transform
