#include "server/transform/variant_module.h"

#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"

namespace tally::server::transform {

VariantModule buildVariantModule(std::string_view ptx) {
  VariantModule out;
  ParseResult parsed = parseModule(ptx);
  if (!parsed.ok) {
    out.error = "unparseable PTX: " + parsed.error;
    return out;
  }
  ModuleTransformResult sliced = addSlicedKernels(parsed.module);
  if (!sliced.ok) {
    out.error = "sliced variants: " + sliced.error;
    return out;
  }
  ModuleTransformResult ptb = addPtbKernels(sliced.module);
  if (!ptb.ok) {
    out.error = "PTB variants: " + ptb.error;
    return out;
  }
  out.sliced = sliced.added;
  out.ptb = ptb.added;
  for (auto& s : sliced.skipped) out.skipped.push_back("sliced " + s);
  for (auto& s : ptb.skipped) out.skipped.push_back("ptb " + s);
  if (out.sliced == 0 && out.ptb == 0) {
    out.error = "no eligible kernel";
    return out;
  }
  out.ptx = printModule(ptb.module);
  out.ok = true;
  return out;
}

}  // namespace tally::server::transform
