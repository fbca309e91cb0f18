// Pieces shared by the kernel variants (sliced, PTB): the logical block index registers, the
// extra parameters, and adding one variant per eligible kernel to a module.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/transform/eligibility.h"
#include "server/transform/ptx.h"

namespace tally::server::transform {

// Registers holding the logical block index and the original grid, plus the scratch registers
// of the index arithmetic. The "%tally_" prefix is never produced by nvcc (it numbers %r, %rd,
// %f, %p ... and uses %SP/%SPL), so the kernel's own registers need no renaming.
inline constexpr const char* kBlockIndexRegisters = R"(
.reg .b32 %tally_ctaid_x, %tally_ctaid_y, %tally_ctaid_z;
.reg .b32 %tally_nctaid_x, %tally_nctaid_y, %tally_nctaid_z;
.reg .b32 %tally_s;
.reg .b64 %tally_linear, %tally_t, %tally_u;
.reg .pred %tally_small;
)";

// Decomposes the linear logical index %tally_linear (x fastest, then y, then z; 64-bit since a
// grid may hold more than 2^32 blocks) into %tally_ctaid_{x,y,z} of the grid %tally_nctaid_*.
// Divisions are what a transformed block pays most for (a 64-bit division is a long software
// sequence), so the common cases avoid them: an index inside the first row (every block of a
// 1-D grid) needs none, an index below 2^32 takes 32-bit ones. Used once per function (its
// labels are fixed). Clobbers %tally_linear, %tally_t, %tally_u, %tally_s, %tally_small.
inline constexpr const char* kDecomposeLinearIndex = R"(
cvt.u64.u32 %tally_u, %tally_nctaid_x;
setp.lt.u64 %tally_small, %tally_linear, %tally_u;
@!%tally_small bra $__tally_decompose_32;
cvt.u32.u64 %tally_ctaid_x, %tally_linear;
mov.u32 %tally_ctaid_y, 0;
mov.u32 %tally_ctaid_z, 0;
bra.uni $__tally_decomposed;
$__tally_decompose_32:
setp.lt.u64 %tally_small, %tally_linear, 4294967296;
@!%tally_small bra $__tally_decompose_64;
cvt.u32.u64 %tally_s, %tally_linear;
rem.u32 %tally_ctaid_x, %tally_s, %tally_nctaid_x;
div.u32 %tally_s, %tally_s, %tally_nctaid_x;
rem.u32 %tally_ctaid_y, %tally_s, %tally_nctaid_y;
div.u32 %tally_ctaid_z, %tally_s, %tally_nctaid_y;
bra.uni $__tally_decomposed;
$__tally_decompose_64:
rem.u64 %tally_t, %tally_linear, %tally_u;
cvt.u32.u64 %tally_ctaid_x, %tally_t;
div.u64 %tally_linear, %tally_linear, %tally_u;
cvt.u64.u32 %tally_u, %tally_nctaid_y;
rem.u64 %tally_t, %tally_linear, %tally_u;
cvt.u32.u64 %tally_ctaid_y, %tally_t;
div.u64 %tally_linear, %tally_linear, %tally_u;
cvt.u32.u64 %tally_ctaid_z, %tally_linear;
$__tally_decomposed:
)";

// A parameter from its declaration text, e.g. ".param .u64 __tally_block_offset".
Param makeParam(std::string_view declaration);

// Replaces every %ctaid.{x,y,z} / %nctaid.{x,y,z} operand token, whatever the instruction, by
// %tally_ctaid_* / %tally_nctaid_*. Returns false if a whole-vector read (%ctaid) is found,
// which has no scalar replacement.
bool rewriteBlockIndexReads(std::vector<Statement>& body);

// Index of the first statement after the declarations that open the body: where a variant's
// code goes so that it runs before every instruction of the kernel.
size_t prologuePosition(const std::vector<Statement>& body);

// True if the kernel already has a parameter named like one of `declarations`.
bool parameterNameClash(const Function& kernel, const std::vector<std::string_view>& declarations);

struct VariantResult {
  bool ok = false;
  Function function;
  std::string error;
};

// The common start of every variant: a copy of `kernel` named `kernel.name + suffix`, with
// `extraParams` appended and every %ctaid/%nctaid read turned into a %tally_* register.
// On failure (not a parsed kernel definition, a parameter name clash, a vector read of the
// block index) `error` says why and the result is unusable.
Function startVariant(const Function& kernel, std::string_view suffix, const std::vector<std::string_view>& extraParams,
                      std::string& error);

// Inserts the PTX statements `prologue` where `f`'s own code starts, before every instruction of
// the kernel. False, with `error` naming `what`, if they do not parse: a bug in the caller's text,
// caught by the unit tests.
bool insertPrologue(Function& f, std::string_view prologue, std::string_view what, std::string& error);

// `f` as a finished variant: visible, since tallyd launches variants by name.
VariantResult finishVariant(Function f);

struct ModuleTransformResult {
  bool ok = false;
  Module module;
  int added = 0;                     // variants added
  std::vector<std::string> skipped;  // "kernel: reason" for kernels left alone
  std::string error;
};

// The module with `make(kernel)` placed right after every kernel for which `wanted(eligibility)`
// is empty; otherwise the kernel is skipped with that reason. Kernels whose variant the module
// already has, and the variants themselves (any "__tally_" suffix), are left alone.
ModuleTransformResult addKernelVariants(const Module& module, std::string_view suffix,
                                        const std::function<std::string(const Eligibility&)>& wanted,
                                        const std::function<VariantResult(const Function&)>& make);

}  // namespace tally::server::transform
