#include "server/transform/kernel_rewrite.h"

#include <array>
#include <set>

#include "server/transform/parser.h"

namespace tally::server::transform {
namespace {

constexpr std::array<std::pair<const char*, const char*>, 6> kSregReplacements{{
    {"%ctaid.x", "%tally_ctaid_x"},
    {"%ctaid.y", "%tally_ctaid_y"},
    {"%ctaid.z", "%tally_ctaid_z"},
    {"%nctaid.x", "%tally_nctaid_x"},
    {"%nctaid.y", "%tally_nctaid_y"},
    {"%nctaid.z", "%tally_nctaid_z"},
}};

std::string_view declaredName(std::string_view declaration) { return declaration.substr(declaration.rfind(' ') + 1); }

}  // namespace

Param makeParam(std::string_view declaration) {
  StatementsResult parsed = parseStatements(std::string(declaration) + ";");
  Param p;
  p.tokens = parsed.statements.at(0).tokens;
  p.name = p.tokens.back().text;
  return p;
}

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

size_t prologuePosition(const std::vector<Statement>& body) {
  size_t i = 0;
  while (i < body.size() &&
         (body[i].kind == StatementKind::kDirective || body[i].kind == StatementKind::kLineDirective)) {
    ++i;
  }
  return i;
}

Function startVariant(const Function& kernel, std::string_view suffix, const std::vector<std::string_view>& extraParams,
                      std::string& error) {
  if (!kernel.isEntry || !kernel.hasBody || !kernel.bodyError.empty()) {
    error = kernel.name + " is not a parsed kernel definition";
    return {};
  }
  if (parameterNameClash(kernel, extraParams)) {
    error = kernel.name + " already has a __tally_* parameter";
    return {};
  }
  Function f = kernel;
  f.name = kernel.name + std::string(suffix);
  f.hasParamList = true;
  for (std::string_view p : extraParams) f.params.push_back(makeParam(p));
  if (!rewriteBlockIndexReads(f.body)) error = kernel.name + " reads %ctaid or %nctaid as a vector";
  return f;
}

bool insertPrologue(Function& f, std::string_view prologue, std::string_view what, std::string& error) {
  StatementsResult parsed = parseStatements(prologue);
  if (!parsed.ok) {
    error = "internal error in the " + std::string(what) + " prologue: " + parsed.error;
    return false;
  }
  f.body.insert(f.body.begin() + static_cast<long>(prologuePosition(f.body)), parsed.statements.begin(),
                parsed.statements.end());
  return true;
}

VariantResult finishVariant(Function f) {
  f.linkage.clear();
  f.linkage.push_back(Token{TokenKind::kDirective, ".visible", 0, false, false});
  VariantResult result;
  result.function = std::move(f);
  result.ok = true;
  return result;
}

bool parameterNameClash(const Function& kernel, const std::vector<std::string_view>& declarations) {
  std::set<std::string, std::less<>> names;
  for (const Param& p : kernel.params) names.insert(p.name);
  for (std::string_view d : declarations) {
    if (names.count(declaredName(d))) return true;
  }
  return false;
}

ModuleTransformResult addKernelVariants(const Module& module, std::string_view suffix,
                                        const std::function<std::string(const Eligibility&)>& wanted,
                                        const std::function<VariantResult(const Function&)>& make) {
  ModuleTransformResult result;
  std::set<std::string> names;
  for (const Item& item : module.items) {
    if (item.kind == ItemKind::kFunction) names.insert(item.function.name);
  }
  for (const Item& item : module.items) {
    result.module.items.push_back(item);
    const Function& f = item.function;
    if (item.kind != ItemKind::kFunction || !f.isEntry || !f.hasBody) continue;
    std::string variantName = f.name + std::string(suffix);
    if (names.count(variantName)) {  // transformed before: keep the existing variant
      result.skipped.push_back(f.name + ": the module already has " + variantName);
      continue;
    }
    if (f.name.find("__tally_") != std::string::npos) continue;  // a variant itself
    if (std::string why = wanted(analyzeKernel(module, f)); !why.empty()) {
      result.skipped.push_back(f.name + ": " + why);
      continue;
    }
    VariantResult variant = make(f);
    if (!variant.ok) {
      result.skipped.push_back(f.name + ": " + variant.error);
      continue;
    }
    Item added;
    added.kind = ItemKind::kFunction;
    added.function = std::move(variant.function);
    result.module.items.push_back(std::move(added));
    ++result.added;
  }
  result.ok = true;
  return result;
}

}  // namespace tally::server::transform
