#include "server/transform/slice.h"

#include "server/transform/parser.h"

namespace tally::server::transform {
namespace {

// Computes the logical block index. Reads of the physical %ctaid/%nctaid here are the only
// ones left in the sliced kernel.
std::string prologue() {
  return std::string(kBlockIndexRegisters) + R"(
.reg .pred %tally_past_end;
ld.param.u32 %tally_nctaid_x, [__tally_grid_x];
ld.param.u32 %tally_nctaid_y, [__tally_grid_y];
ld.param.u32 %tally_nctaid_z, [__tally_grid_z];
ld.param.u64 %tally_linear, [__tally_block_offset];
mov.u32 %tally_s, %ctaid.z;
cvt.u64.u32 %tally_t, %tally_s;
mov.u32 %tally_s, %nctaid.y;
cvt.u64.u32 %tally_u, %tally_s;
mul.lo.u64 %tally_t, %tally_t, %tally_u;
mov.u32 %tally_s, %ctaid.y;
cvt.u64.u32 %tally_u, %tally_s;
add.u64 %tally_t, %tally_t, %tally_u;
mov.u32 %tally_s, %nctaid.x;
cvt.u64.u32 %tally_u, %tally_s;
mul.lo.u64 %tally_t, %tally_t, %tally_u;
mov.u32 %tally_s, %ctaid.x;
cvt.u64.u32 %tally_u, %tally_s;
add.u64 %tally_t, %tally_t, %tally_u;
add.u64 %tally_linear, %tally_linear, %tally_t;
mul.wide.u32 %tally_t, %tally_nctaid_x, %tally_nctaid_y;
cvt.u64.u32 %tally_u, %tally_nctaid_z;
mul.lo.u64 %tally_t, %tally_t, %tally_u;
setp.ge.u64 %tally_past_end, %tally_linear, %tally_t;
@%tally_past_end exit;
)" + kDecomposeLinearIndex;
}

const std::vector<std::string_view> kExtraParams{".param .u32 __tally_grid_x", ".param .u32 __tally_grid_y",
                                                 ".param .u32 __tally_grid_z", ".param .u64 __tally_block_offset"};

}  // namespace

SliceResult makeSlicedKernel(const Function& kernel) {
  SliceResult result;
  Function f = startVariant(kernel, kSlicedSuffix, kExtraParams, result.error);
  if (!result.error.empty()) return result;
  if (!insertPrologue(f, prologue(), "slicing", result.error)) return result;
  return finishVariant(std::move(f));
}

ModuleTransformResult addSlicedKernels(const Module& module) {
  return addKernelVariants(
      module, kSlicedSuffix, [](const Eligibility& e) { return e.eligible ? std::string() : e.reason; },
      makeSlicedKernel);
}

}  // namespace tally::server::transform
