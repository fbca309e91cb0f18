// The chained variant of a high-priority kernel: the same kernel, opened by a wait for the
// previous kernel of its stream and a signal that lets the next one be scheduled early
// (programmatic dependent launch, sm_90). Launched with the programmatic-serialization attribute
// after another kernel, its blocks are queued at high priority while that kernel's last wave
// still runs, so the SMs it frees go to them and not to pending best-effort blocks; they wait in
// the kernel until the previous one has finished and its writes are visible. Without the
// attribute (the first kernel after a copy) the wait returns at once; the signal still lets the
// next chained kernel be queued while this one's blocks run.
#pragma once

#include <string>

#include "server/transform/kernel_rewrite.h"
#include "server/transform/ptx.h"

namespace tally::server::transform {

inline constexpr const char* kChainedSuffix = "__tally_chained";

// griddepcontrol needs PTX ISA 7.8 and sm_90. A module for an older target is left alone:
// raising its .target could change what older instructions mean (e.g. shfl without .sync).
inline constexpr unsigned kChainMinArch = 90;

// Builds `<name>__tally_chained` from a parsed kernel definition.
VariantResult makeChainedKernel(const Function& kernel);

// The module with the chained variant of every kernel placed right after its original, but for
// kernels that use programmatic dependent launch themselves (they order themselves). A module
// below sm_90 gets none. `skipped` says why for each kernel left alone.
ModuleTransformResult addChainedKernels(const Module& module);

}  // namespace tally::server::transform
