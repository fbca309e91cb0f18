// The chained variant (server/transform/chain.h): golden output on hand-written PTX, the
// modules it refuses, and every corpus module at sm_90 assembling with one variant per kernel.
#include <gtest/gtest.h>

#include <set>

#include "server/transform/chain.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/variant_module.h"
#include "test_util.h"

namespace tally::server::transform {
namespace {

namespace fs = std::filesystem;

constexpr const char* kKernel = R"(
.entry k(
	.param .u64 k_param_0
)
{
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [k_param_0];
	mov.u32 %r1, %ctaid.x;
	st.global.u32 [%rd1], %r1;
	ret;
}
)";

std::string header(unsigned arch) { return ".version 8.0\n.target sm_" + std::to_string(arch) + "\n.address_size 64\n"; }

Module parse(const std::string& text) {
  ParseResult r = parseModule(text);
  EXPECT_TRUE(r.ok) << r.error;
  return r.module;
}

const Function* findFunction(const Module& m, const std::string& name) {
  for (const Item& item : m.items) {
    if (item.kind == ItemKind::kFunction && item.function.name == name) return &item.function;
  }
  return nullptr;
}

std::vector<std::string> instructions(const Function& f) {
  std::vector<std::string> out;
  for (const Statement& s : f.body) {
    if (s.kind == StatementKind::kInstruction) out.push_back(printStatement(s));
  }
  return out;
}

TEST(Chain, VariantWaitsThenSignalsBeforeTheKernelsOwnCode) {
  ModuleTransformResult r = addChainedKernels(parse(header(90) + kKernel));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.added, 1);
  const Function* original = findFunction(r.module, "k");
  const Function* chained = findFunction(r.module, std::string("k") + kChainedSuffix);
  ASSERT_NE(original, nullptr);
  ASSERT_NE(chained, nullptr);
  std::vector<std::string> expected = {"griddepcontrol.wait;", "griddepcontrol.launch_dependents;"};
  for (const std::string& line : instructions(*original)) expected.push_back(line);
  EXPECT_EQ(instructions(*chained), expected);
  EXPECT_EQ(chained->params.size(), original->params.size());  // launched with the kernel's own parameters
  ASSERT_EQ(chained->linkage.size(), 1u);
  EXPECT_EQ(chained->linkage[0].text, ".visible");  // tallyd finds it by name
  EXPECT_EQ(instructions(*original).front().rfind("ld.param", 0), 0u);  // the original is untouched
}

TEST(Chain, ModuleBelowSm90GetsNoVariant) {
  ModuleTransformResult r = addChainedKernels(parse(header(80) + kKernel));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.added, 0);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("sm_90"), std::string::npos) << r.skipped[0];
}

TEST(Chain, AKernelThatChainsItselfGetsNoVariantItsNeighboursDo) {
  std::string own = kKernel;
  own.replace(own.find("ret;"), 4, "griddepcontrol.launch_dependents;\n\tret;");
  own.replace(own.find(".entry k("), 9, ".entry own(");
  own.replace(own.find("k_param_0"), 9, "own_param_0");
  own.replace(own.find("k_param_0"), 9, "own_param_0");
  ModuleTransformResult r = addChainedKernels(parse(header(90) + own + kKernel));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.added, 1);
  EXPECT_NE(findFunction(r.module, std::string("k") + kChainedSuffix), nullptr);
  EXPECT_EQ(findFunction(r.module, std::string("own") + kChainedSuffix), nullptr);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("own: uses programmatic dependent launch"), std::string::npos) << r.skipped[0];
}

TEST(Chain, HighPriorityFamilyHasOnlyChainedVariants) {
  VariantModule v = buildVariantModule(header(90) + kKernel, VariantFamily::kHighPriority);
  ASSERT_TRUE(v.ok) << v.error;
  EXPECT_EQ(v.chained, 1);
  EXPECT_EQ(v.sliced + v.ptb, 0);
  VariantModule be = buildVariantModule(header(90) + kKernel, VariantFamily::kBestEffort);
  ASSERT_TRUE(be.ok) << be.error;
  EXPECT_EQ(be.chained, 0);
  EXPECT_GT(be.sliced, 0);
  EXPECT_FALSE(buildVariantModule(header(80) + kKernel, VariantFamily::kHighPriority).ok);
}

// Every kernel of every sm_90 corpus module (grid sync, clusters, barriers, %smid readers: none
// of that matters to chaining) gets its variant, and ptxas accepts the result; but the cluster
// unit's c_griddep, which uses programmatic dependent launch itself.
class ChainCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ChainCorpus, EveryKernelGetsAVariantAndTheModuleAssembles) {
  const fs::path input = fs::path(TALLY_TRANSFORM_CORPUS_DIR) / (GetParam() + "_sm90.ptx");
  Module m = parse(test::readText(input));
  std::set<std::string> kernels;
  for (const Item& item : m.items) {
    if (item.kind == ItemKind::kFunction && item.function.isEntry && item.function.hasBody) {
      kernels.insert(item.function.name);
    }
  }
  ModuleTransformResult r = addChainedKernels(m);
  ASSERT_TRUE(r.ok) << r.error;
  const std::set<std::string> chainsItself = GetParam() == "cluster" ? std::set<std::string>{"c_griddep"}
                                                                     : std::set<std::string>{};
  EXPECT_EQ(r.added, static_cast<int>(kernels.size() - chainsItself.size()));
  EXPECT_EQ(r.skipped.size(), chainsItself.size());
  for (const std::string& k : kernels) {
    EXPECT_EQ(findFunction(r.module, k + kChainedSuffix) != nullptr, chainsItself.count(k) == 0) << k;
  }
  fs::path dir = test::scratchDir("chained");
  const std::string out = (dir / "chained.ptx").string();
  test::writeText(out, printModule(r.module));
  test::CommandResult ptxas =
      test::runCommand(test::quote(TALLY_TRANSFORM_PTXAS) + " -arch=sm_90 " + test::quote(out) + " -o /dev/null");
  EXPECT_EQ(ptxas.status, 0) << ptxas.output;
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Sm90, ChainCorpus, ::testing::Values("grids", "sync", "ineligible", "cluster"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tally::server::transform
