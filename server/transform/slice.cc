#include "server/transform/slice.h"

#include <array>
#include <set>

#include "server/transform/eligibility.h"
#include "server/transform/parser.h"

namespace tally::server::transform {
namespace {

// Registers of the prologue. The "%tally_" prefix is never produced by nvcc (it numbers %r,
// %rd, %f, %p ... and uses %SP/%SPL), so no renaming of the kernel's own registers is needed.
constexpr std::array<std::pair<const char*, const char*>, 6> kSregReplacements{{
    {"%ctaid.x", "%tally_ctaid_x"},
    {"%ctaid.y", "%tally_ctaid_y"},
    {"%ctaid.z", "%tally_ctaid_z"},
    {"%nctaid.x", "%tally_nctaid_x"},
    {"%nctaid.y", "%tally_nctaid_y"},
    {"%nctaid.z", "%tally_nctaid_z"},
}};

// Computes the logical block index. Reads of the physical %ctaid/%nctaid here are the only
// ones left in the sliced kernel. 64-bit linear arithmetic: a grid may hold more than 2^32
// blocks (2^31-1 x 65535 x 65535).
constexpr const char* kPrologue = R"(
.reg .b32 %tally_ctaid_x, %tally_ctaid_y, %tally_ctaid_z;
.reg .b32 %tally_nctaid_x, %tally_nctaid_y, %tally_nctaid_z;
.reg .b32 %tally_s;
.reg .b64 %tally_linear, %tally_t, %tally_u;
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
cvt.u64.u32 %tally_u, %tally_nctaid_x;
rem.u64 %tally_t, %tally_linear, %tally_u;
cvt.u32.u64 %tally_ctaid_x, %tally_t;
div.u64 %tally_linear, %tally_linear, %tally_u;
cvt.u64.u32 %tally_u, %tally_nctaid_y;
rem.u64 %tally_t, %tally_linear, %tally_u;
cvt.u32.u64 %tally_ctaid_y, %tally_t;
div.u64 %tally_linear, %tally_linear, %tally_u;
cvt.u32.u64 %tally_ctaid_z, %tally_linear;
)";

constexpr std::array<const char*, kSlicedExtraParams> kExtraParams{
    ".param .u32 __tally_grid_x", ".param .u32 __tally_grid_y", ".param .u32 __tally_grid_z",
    ".param .u64 __tally_block_offset"};

Param makeParam(const char* text) {
  StatementsResult parsed = parseStatements(std::string(text) + ";");
  Param p;
  p.tokens = parsed.statements.at(0).tokens;
  p.name = p.tokens.back().text;
  return p;
}

// Replaces every %ctaid.{x,y,z} / %nctaid.{x,y,z} operand token, whatever the instruction.
// Returns false if a whole-vector read (%ctaid) is found, which has no scalar replacement.
bool rewriteBlockIndexReads(std::vector<Statement>& body) {
  for (Statement& s : body) {
    for (Operand& op : s.operands) {
      for (Token& t : op.tokens) {
        if (t.kind != TokenKind::kWord) continue;
        if (t.text == "%ctaid" || t.text == "%nctaid") return false;
        for (const auto& [from, to] : kSregReplacements) {
          if (t.text == from) t.text = to;
        }
      }
    }
  }
  return true;
}

// Where the prologue goes: after the declarations that open the body, so that every
// instruction of the kernel runs after it.
size_t prologuePosition(const std::vector<Statement>& body) {
  size_t i = 0;
  while (i < body.size() &&
         (body[i].kind == StatementKind::kDirective || body[i].kind == StatementKind::kLineDirective)) {
    ++i;
  }
  return i;
}

bool nameClash(const Function& kernel) {
  std::set<std::string> names;
  for (const Param& p : kernel.params) names.insert(p.name);
  for (const char* p : kExtraParams) {
    std::string_view text(p);
    if (names.count(std::string(text.substr(text.rfind(' ') + 1)))) return true;
  }
  return false;
}

}  // namespace

SliceResult makeSlicedKernel(const Function& kernel) {
  SliceResult result;
  if (!kernel.isEntry || !kernel.hasBody || !kernel.bodyError.empty()) {
    result.error = kernel.name + " is not a parsed kernel definition";
    return result;
  }
  if (nameClash(kernel)) {
    result.error = kernel.name + " already has a __tally_* parameter";
    return result;
  }
  Function f = kernel;
  f.name = kernel.name + kSlicedSuffix;
  f.hasParamList = true;
  for (const char* p : kExtraParams) f.params.push_back(makeParam(p));
  if (!rewriteBlockIndexReads(f.body)) {
    result.error = kernel.name + " reads %ctaid or %nctaid as a vector";
    return result;
  }
  StatementsResult prologue = parseStatements(kPrologue);
  if (!prologue.ok) {  // a bug in kPrologue, caught by the unit tests
    result.error = "internal error in the slicing prologue: " + prologue.error;
    return result;
  }
  f.body.insert(f.body.begin() + static_cast<long>(prologuePosition(f.body)), prologue.statements.begin(),
                prologue.statements.end());
  // A sliced kernel is always launched by name from tallyd, so it must be visible.
  f.linkage.clear();
  f.linkage.push_back(Token{TokenKind::kDirective, ".visible", 0, false, false});
  result.function = std::move(f);
  result.ok = true;
  return result;
}

ModuleTransformResult addSlicedKernels(const Module& module) {
  ModuleTransformResult result;
  std::set<std::string> names;
  for (const Item& item : module.items) {
    if (item.kind == ItemKind::kFunction) names.insert(item.function.name);
  }
  for (const Item& item : module.items) {
    result.module.items.push_back(item);
    const Function& f = item.function;
    if (item.kind != ItemKind::kFunction || !f.isEntry || !f.hasBody) continue;
    if (names.count(f.name + kSlicedSuffix)) {  // transformed before: keep the existing variant
      result.skipped.push_back(f.name + ": the module already has " + f.name + kSlicedSuffix);
      continue;
    }
    if (f.name.size() >= std::string_view(kSlicedSuffix).size() &&
        f.name.ends_with(kSlicedSuffix)) {
      continue;  // a variant itself
    }
    Eligibility e = analyzeKernel(module, f);
    if (!e.eligible) {
      result.skipped.push_back(f.name + ": " + e.reason);
      continue;
    }
    SliceResult sliced = makeSlicedKernel(f);
    if (!sliced.ok) {
      result.skipped.push_back(f.name + ": " + sliced.error);
      continue;
    }
    Item variant;
    variant.kind = ItemKind::kFunction;
    variant.function = std::move(sliced.function);
    result.module.items.push_back(std::move(variant));
    ++result.added;
  }
  result.ok = true;
  return result;
}

}  // namespace tally::server::transform
