// The sliced transform and the eligibility analysis on small hand-written PTX (golden tests).
#include <gtest/gtest.h>

#include <regex>

#include "server/transform/eligibility.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/slice.h"

namespace tally::server::transform {
namespace {

constexpr const char* kHeader = ".version 8.0\n.target sm_80\n.address_size 64\n";

// Block index and grid size read in several instruction forms. ptxas itself only accepts
// special registers in mov/cvt, but the rewrite must not depend on that: it replaces the
// register in any operand position (so this snippet, unlike its sliced form, is not valid PTX).
constexpr const char* kKernel = R"(
.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<12>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [k_param_0];
	mov.u32 %r1, %ctaid.x;
	cvt.u64.u32 %rd2, %ctaid.y;
	add.s32 %r2, %ctaid.z, %nctaid.x;
	mad.lo.s32 %r3, %nctaid.y, %ctaid.x, %nctaid.z;
	mul.wide.u32 %rd3, %ctaid.x, 4;
	setp.ge.u32 %p1, %ctaid.y, %nctaid.y;
	@%p1 bra $L__BB0_2;
	mov.u32 %r4, %tid.x;
	st.global.v2.u32 [%rd1], {%r1, %r2};
$L__BB0_2:
	ret;
}
)";

constexpr const char* kGoldenBody = R"(ld.param.u64 %rd1, [k_param_0];
mov.u32 %r1, %tally_ctaid_x;
cvt.u64.u32 %rd2, %tally_ctaid_y;
add.s32 %r2, %tally_ctaid_z, %tally_nctaid_x;
mad.lo.s32 %r3, %tally_nctaid_y, %tally_ctaid_x, %tally_nctaid_z;
mul.wide.u32 %rd3, %tally_ctaid_x, 4;
setp.ge.u32 %p1, %tally_ctaid_y, %tally_nctaid_y;
@%p1 bra $L__BB0_2;
mov.u32 %r4, %tid.x;
st.global.v2.u32 [%rd1], {%r1, %r2};
$L__BB0_2:
ret;
)";

Function parseKernel(const std::string& body) {
  ParseResult r = parseModule(std::string(kHeader) + body);
  EXPECT_TRUE(r.ok) << r.error;
  for (const Item& item : r.module.items) {
    if (item.kind == ItemKind::kFunction && item.function.isEntry) return item.function;
  }
  ADD_FAILURE() << "no kernel";
  return {};
}

// The statements after the prologue (which ends with the last write of %tally_ctaid_z).
std::string bodyAfterPrologue(const Function& f) {
  std::string out;
  bool inPrologue = true;
  for (const Statement& s : f.body) {
    std::string line = printStatement(s);
    if (!inPrologue) out += line + "\n";
    if (line == "$__tally_decomposed:") inPrologue = false;
  }
  return out;
}

TEST(Slice, RewritesEveryBlockIndexReadGolden) {
  SliceResult r = makeSlicedKernel(parseKernel(kKernel));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.function.name, "k__tally_sliced");
  EXPECT_EQ(bodyAfterPrologue(r.function), kGoldenBody);
}

TEST(Slice, AppendsGridAndOffsetParameters) {
  SliceResult r = makeSlicedKernel(parseKernel(kKernel));
  ASSERT_TRUE(r.ok);
  std::vector<std::string> names;
  for (const Param& p : r.function.params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"k_param_0", "__tally_grid_x", "__tally_grid_y", "__tally_grid_z",
                                             "__tally_block_offset"}));
  EXPECT_EQ(joinTokens(r.function.params[4].tokens), ".param .u64 __tally_block_offset");
}

TEST(Slice, PhysicalReadsOnlyInThePrologueWhichExitsPastTheGrid) {
  SliceResult r = makeSlicedKernel(parseKernel(kKernel));
  ASSERT_TRUE(r.ok);
  std::string all;
  for (const Statement& s : r.function.body) all += printStatement(s) + "\n";
  std::string prologue = all.substr(0, all.find("ld.param.u64 %rd1"));
  std::string rest = all.substr(prologue.size());
  EXPECT_EQ(rest.find("%ctaid"), std::string::npos);
  EXPECT_EQ(rest.find("%nctaid"), std::string::npos);
  EXPECT_NE(prologue.find("@%tally_past_end exit;"), std::string::npos);
  // The early exit comes before the logical index is used by the kernel's code.
  EXPECT_LT(prologue.find("exit;"), prologue.find("cvt.u32.u64 %tally_ctaid_x"));
  // Declarations first: the prologue starts after the kernel's own .reg lines.
  EXPECT_EQ(r.function.body[3].kind, StatementKind::kDirective);
  EXPECT_EQ(printStatement(r.function.body[3]).rfind(".reg .b32 %tally_ctaid_x", 0), 0u);
}

TEST(Slice, KernelWithoutParametersOrBlockIndex) {
  SliceResult r = makeSlicedKernel(parseKernel(".visible .entry k()\n{\nret;\n}\n"));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.function.params.size(), 4u);
  EXPECT_EQ(printStatement(r.function.body.back()), "ret;");
}

TEST(Slice, RefusesVectorReadsAndBrokenBodies) {
  EXPECT_FALSE(makeSlicedKernel(parseKernel(".visible .entry k()\n{\n.reg .b32 %r<5>;\nmov.v4.u32 {%r1, %r2, %r3, %r4}, %ctaid;\nret;\n}\n")).ok);
  EXPECT_FALSE(makeSlicedKernel(parseKernel(".visible .entry k()\n{\nmov.u32 %r1 %r2\n}\n")).ok);
}

TEST(Slice, ModuleGetsVariantBesideEligibleKernelsOnly) {
  ParseResult m = parseModule(std::string(kHeader) + kKernel +
                              ".visible .entry bad()\n{\n.reg .b32 %r<2>;\nmov.u32 %r1, %smid;\nret;\n}\n");
  ASSERT_TRUE(m.ok);
  ModuleTransformResult r = addSlicedKernels(m.module);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.added, 1);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_NE(r.skipped[0].find("bad: reads %smid"), std::string::npos);
  std::vector<std::string> names;
  for (const Item& item : r.module.items) {
    if (item.kind == ItemKind::kFunction) names.push_back(item.function.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"k", "k__tally_sliced", "bad"}));
  // Transforming again adds nothing new.
  ModuleTransformResult again = addSlicedKernels(r.module);
  EXPECT_EQ(again.added, 0);
}

struct EligibilityCase {
  const char* body;
  const char* reason;  // nullptr: eligible
};

TEST(Eligibility, ReasonsOnSnippets) {
  const EligibilityCase cases[] = {
      {"mov.u32 %r1, %ctaid.x;", nullptr},
      {"mov.u32 %r1, %smid;", "reads %smid"},
      {"mov.u32 %r1, %nsmid;", "reads %nsmid"},
      {"mov.u64 %rd1, %gridid;", "reads %gridid"},
      {"mov.u32 %r1, %envreg1;", "grid sync"},
      {"mov.u32 %r1, %clusterid.x;", "cluster kernel"},
      {"mov.u32 %r1, %cluster_ctaid.x;", "cluster kernel"},
      {"mapa.u64 %rd1, %rd2, %r1;", "cluster kernel (mapa.u64)"},
      {"ld.shared::cluster.u32 %r1, [%r2];", "cluster kernel"},
      {"barrier.cluster.arrive;", "cluster kernel"},
      {"griddepcontrol.launch_dependents;", "programmatic dependent launch"},
      {"bar.sync 1, 64;", nullptr},
  };
  for (const EligibilityCase& c : cases) {
    std::string text = std::string(kHeader) + ".visible .entry k()\n{\n.reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n" +
                       c.body + "\nret;\n}\n";
    ParseResult m = parseModule(text);
    ASSERT_TRUE(m.ok) << m.error;
    std::vector<Eligibility> e = analyzeModule(m.module);
    ASSERT_EQ(e.size(), 1u);
    if (c.reason == nullptr) {
      EXPECT_TRUE(e[0].eligible) << c.body << ": " << e[0].reason;
    } else {
      EXPECT_FALSE(e[0].eligible) << c.body;
      EXPECT_NE(e[0].reason.find(c.reason), std::string::npos) << c.body << ": " << e[0].reason;
    }
  }
}

TEST(Eligibility, ClusterAttributesAndCalleesAndBrokenBodies) {
  ParseResult m = parseModule(std::string(kHeader) +
                              ".func (.param .b32 r) f()\n{\n.reg .b32 %r<2>;\nmov.u32 %r1, %nctaid.y;\n"
                              "st.param.b32 [r+0], %r1;\nret;\n}\n"
                              ".func g()\n{\ncall.uni f, ();\nret;\n}\n"
                              ".visible .entry calls_g()\n{\ncall.uni g, ();\nret;\n}\n"
                              ".visible .entry cluster() .reqnctapercluster 2, 1, 1\n{\nret;\n}\n"
                              ".visible .entry explicit() .explicitcluster\n{\nret;\n}\n"
                              ".visible .entry broken()\n{\nadd.s32 %r1 %r2;\n}\n");
  ASSERT_TRUE(m.ok) << m.error;
  std::vector<Eligibility> e = analyzeModule(m.module);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_NE(e[0].reason.find("calls f, which reads %nctaid.y"), std::string::npos) << e[0].reason;
  EXPECT_NE(e[1].reason.find("cluster kernel (.reqnctapercluster)"), std::string::npos);
  EXPECT_NE(e[2].reason.find("cluster kernel (.explicitcluster)"), std::string::npos);
  EXPECT_NE(e[3].reason.find("unparseable body"), std::string::npos);
}

}  // namespace
}  // namespace tally::server::transform
