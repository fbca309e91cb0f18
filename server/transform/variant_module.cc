#include "server/transform/variant_module.h"

#include "server/transform/chain.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"

namespace tally::server::transform {
namespace {

void addSkipped(VariantModule& out, std::string_view kind, const ModuleTransformResult& pass) {
  for (const auto& s : pass.skipped) out.skipped.push_back(std::string(kind) + " " + s);
}

bool addBestEffortVariants(const Module& parsed, VariantModule& out, Module& result) {
  ModuleTransformResult sliced = addSlicedKernels(parsed);
  if (!sliced.ok) {
    out.error = "sliced variants: " + sliced.error;
    return false;
  }
  ModuleTransformResult ptb = addPtbKernels(sliced.module);
  if (!ptb.ok) {
    out.error = "PTB variants: " + ptb.error;
    return false;
  }
  out.sliced = sliced.added;
  out.ptb = ptb.added;
  addSkipped(out, "sliced", sliced);
  addSkipped(out, "ptb", ptb);
  result = std::move(ptb.module);
  return true;
}

bool addHighPriorityVariants(const Module& parsed, VariantModule& out, Module& result) {
  ModuleTransformResult chained = addChainedKernels(parsed);
  if (!chained.ok) {
    out.error = "chained variants: " + chained.error;
    return false;
  }
  out.chained = chained.added;
  addSkipped(out, "chained", chained);
  result = std::move(chained.module);
  return true;
}

}  // namespace

const char* familyName(VariantFamily family) {
  return family == VariantFamily::kBestEffort ? "sliced+ptb" : "chained";
}

VariantModule buildVariantModule(std::string_view ptx, VariantFamily family) {
  VariantModule out;
  ParseResult parsed = parseModule(ptx);
  if (!parsed.ok) {
    out.error = "unparseable PTX: " + parsed.error;
    return out;
  }
  Module result;
  const bool built = family == VariantFamily::kBestEffort ? addBestEffortVariants(parsed.module, out, result)
                                                          : addHighPriorityVariants(parsed.module, out, result);
  if (!built) return out;
  if (out.sliced == 0 && out.ptb == 0 && out.chained == 0) {
    out.error = "no eligible kernel";
    return out;
  }
  out.ptx = printModule(result);
  out.ok = true;
  return out;
}

}  // namespace tally::server::transform
