// The sliced variant of a kernel: it runs a contiguous range of the original grid's blocks, so
// the scheduler can split one launch into several shorter ones.
#pragma once

#include <string>

#include "server/transform/kernel_rewrite.h"
#include "server/transform/ptx.h"

namespace tally::server::transform {

inline constexpr const char* kSlicedSuffix = "__tally_sliced";

// Parameters appended after the kernel's own, in this order (names as in the PTX):
//   .param .u32 __tally_grid_x, __tally_grid_y, __tally_grid_z   the original launch's gridDim
//   .param .u64 __tally_block_offset   linear index (x fastest, then y, then z) of the original
//                                      block that physical block (0,0,0) of this launch runs
// Physical block p (linearised the same way over the launch's own grid) runs original block
// offset + p, decomposed back into (x, y, z) of the original grid; physical blocks whose
// logical index is past the original grid exit at once. Every read of %ctaid.{x,y,z} sees that
// logical index and every read of %nctaid.{x,y,z} the original grid.
inline constexpr int kSlicedExtraParams = 4;

using SliceResult = VariantResult;

// Builds `<name>__tally_sliced` from an eligible kernel. Fails if the kernel is not a
// parsed .entry or reads %ctaid/%nctaid as a whole vector.
SliceResult makeSlicedKernel(const Function& kernel);

// The module with the sliced variant of every eligible kernel placed right after its original.
ModuleTransformResult addSlicedKernels(const Module& module);

}  // namespace tally::server::transform
