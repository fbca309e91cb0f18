// Whole-module tests over the nvcc-generated corpus (corpus/*.cu -> PTX at build time):
// round trip, ptxas acceptance, expected eligibility, sliced and PTB variants, the tally-ptx
// tool, and robustness against truncated input.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "server/transform/eligibility.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"
#include "test_util.h"

namespace tally::server::transform {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::quote;
using test::runCommand;

const fs::path kCorpus = TALLY_TRANSFORM_CORPUS_DIR;
const std::string kTool = TALLY_TRANSFORM_TOOL;
const std::string kPtxas = TALLY_TRANSFORM_PTXAS;

struct CorpusModule {
  std::string unit;
  int arch;
  std::string file() const { return (kCorpus / (unit + "_sm" + std::to_string(arch) + ".ptx")).string(); }
};

const std::vector<CorpusModule> kModules = {{"grids", 80}, {"grids", 90}, {"sync", 80}, {"sync", 90},
                                            {"ineligible", 80}, {"ineligible", 90}, {"cluster", 90}};

// Readable test parameters in CTest names and failure messages.
void PrintTo(const CorpusModule& m, std::ostream* os) { *os << m.unit << "_sm" << m.arch; }

struct Expected {
  bool eligible = false;  // sliced (and PTB unless sliced-only)
  bool ptb = false;
  std::string reason;  // substring of the reason (the PTB reason for sliced-only kernels)
};

// unit -> kernel -> expectation, from expected_eligibility.txt.
std::map<std::string, std::map<std::string, Expected>> loadExpected() {
  std::map<std::string, std::map<std::string, Expected>> out;
  std::istringstream in(test::readText(TALLY_TRANSFORM_EXPECTED));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string unit, kernel, status;
    fields >> unit >> kernel >> status;
    Expected e;
    e.eligible = status == "eligible" || status == "sliced-only";
    e.ptb = status == "eligible";
    std::getline(fields >> std::ws, e.reason);
    out[unit][kernel] = e;
  }
  return out;
}

std::string ptxasCheck(const std::string& path, int arch) {
  CommandResult r = runCommand(quote(kPtxas) + " -arch=sm_" + std::to_string(arch) + " " + quote(path) + " -o /dev/null");
  return r.status == 0 ? "" : r.output.empty() ? "ptxas failed" : r.output;
}

std::string printStatementList(const Function& f) {
  std::string out;
  for (const Statement& s : f.body) out += printStatement(s) + "\n";
  return out;
}

class Corpus : public ::testing::TestWithParam<CorpusModule> {
 protected:
  std::string text() const { return test::readText(GetParam().file()); }
  Module parsed() const {
    ParseResult r = parseModule(text());
    EXPECT_TRUE(r.ok) << r.error;
    return r.module;
  }
};

TEST_P(Corpus, ParsesEveryFunctionBody) {
  Module m = parsed();
  int functions = 0;
  for (const Item& item : m.items) {
    if (item.kind != ItemKind::kFunction) continue;
    ++functions;
    EXPECT_TRUE(item.function.bodyError.empty()) << item.function.name << ": " << item.function.bodyError;
  }
  EXPECT_GT(functions, 0);
}

TEST_P(Corpus, PrintGivesBackTheSameTokens) {
  std::string original = text();
  std::string printed = printModule(parsed());
  EXPECT_EQ(test::tokenTexts(printed), test::tokenTexts(original));
  ParseResult again = parseModule(printed);
  ASSERT_TRUE(again.ok) << again.error;
  EXPECT_EQ(printModule(again.module), printed);
}

TEST_P(Corpus, PrintedModulePassesPtxas) {
  fs::path dir = test::scratchDir("print");
  std::string out = (dir / "printed.ptx").string();
  CommandResult r = runCommand(quote(kTool) + " print " + quote(GetParam().file()) + " -o " + quote(out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(ptxasCheck(out, GetParam().arch), "");
  fs::remove_all(dir);
}

TEST_P(Corpus, ListMatchesExpectedTable) {
  auto expected = loadExpected()[GetParam().unit];
  ASSERT_FALSE(expected.empty());
  CommandResult r = runCommand(quote(kTool) + " list " + quote(GetParam().file()));
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  std::set<std::string> seen;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string kernel, status, reason;
    fields >> kernel >> status;
    std::getline(fields >> std::ws, reason);
    ASSERT_TRUE(expected.count(kernel)) << "kernel missing from expected_eligibility.txt: " << line;
    const Expected& e = expected[kernel];
    EXPECT_EQ(status, e.eligible ? "eligible" : "ineligible") << line;
    if (e.ptb) {
      EXPECT_EQ(reason, "") << line;
    } else if (e.eligible) {
      EXPECT_EQ(reason.rfind("(sliced only: ", 0), 0u) << line;
      EXPECT_NE(reason.find(e.reason), std::string::npos) << line;
    } else {
      EXPECT_FALSE(reason.empty()) << line;
      EXPECT_NE(reason.find(e.reason), std::string::npos) << line;
    }
    seen.insert(kernel);
  }
  EXPECT_EQ(seen.size(), expected.size()) << "tally-ptx list did not report every kernel";
}

TEST_P(Corpus, SlicedModulePassesPtxasWithOneVariantPerEligibleKernel) {
  auto expected = loadExpected()[GetParam().unit];
  fs::path dir = test::scratchDir("sliced");
  std::string out = (dir / "sliced.ptx").string();
  CommandResult r = runCommand(quote(kTool) + " transform --variant sliced " + quote(GetParam().file()) + " -o " + quote(out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(ptxasCheck(out, GetParam().arch), "");

  ParseResult m = parseModule(test::readText(out));
  ASSERT_TRUE(m.ok) << m.error;
  std::set<std::string> variants;
  for (const Item& item : m.module.items) {
    const Function& f = item.function;
    if (item.kind != ItemKind::kFunction || !f.name.ends_with(kSlicedSuffix)) continue;
    variants.insert(f.name.substr(0, f.name.size() - std::string(kSlicedSuffix).size()));
    // Only the prologue (before the early exit's decomposition ends) reads the physical index.
    bool afterPrologue = false;
    for (const Statement& s : f.body) {
      std::string line = printStatement(s);
      if (afterPrologue) {
        EXPECT_EQ(line.find("ctaid."), std::string::npos) << f.name << ": " << line;
      }
      if (line.rfind("cvt.u32.u64 %tally_ctaid_z", 0) == 0) afterPrologue = true;
    }
    EXPECT_TRUE(afterPrologue) << f.name;
  }
  std::set<std::string> eligible;
  for (const auto& [kernel, e] : expected) {
    if (e.eligible) eligible.insert(kernel);
  }
  EXPECT_EQ(variants, eligible);
  fs::remove_all(dir);
}

// Every PTB-eligible kernel gets its variant, the module assembles, the variant never reads the
// physical block index, keeps no `ret` (its only exit is the claim loop's), and device
// functions are printed as they were.
TEST_P(Corpus, PtbModulePassesPtxasWithOneVariantPerPtbEligibleKernel) {
  auto expected = loadExpected()[GetParam().unit];
  fs::path dir = test::scratchDir("ptb");
  std::string out = (dir / "ptb.ptx").string();
  CommandResult r = runCommand(quote(kTool) + " transform --variant ptb " + quote(GetParam().file()) + " -o " + quote(out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(ptxasCheck(out, GetParam().arch), "");

  ParseResult m = parseModule(test::readText(out));
  ASSERT_TRUE(m.ok) << m.error;
  auto funcs = [](const Module& module) {
    std::vector<std::pair<std::string, std::string>> out;  // prototypes and definitions, in order
    for (const Item& item : module.items) {
      if (item.kind == ItemKind::kFunction && !item.function.isEntry) out.emplace_back(item.function.name, printStatementList(item.function));
    }
    return out;
  };
  EXPECT_EQ(funcs(m.module), funcs(parsed()));
  std::set<std::string> variants;
  for (const Item& item : m.module.items) {
    const Function& f = item.function;
    if (item.kind != ItemKind::kFunction || !f.isEntry) continue;
    if (!f.name.ends_with(kPtbSuffix)) continue;
    variants.insert(f.name.substr(0, f.name.size() - std::string(kPtbSuffix).size()));
    int exits = 0;
    for (const Statement& s : f.body) {
      std::string line = printStatement(s);
      EXPECT_EQ(line.find("ctaid."), std::string::npos) << f.name << ": " << line;
      EXPECT_NE(s.opcode, "ret") << f.name;
      if (s.opcode == "exit") ++exits;
    }
    EXPECT_EQ(exits, 1) << f.name;
  }
  std::set<std::string> eligible;
  for (const auto& [kernel, e] : expected) {
    if (e.ptb) eligible.insert(kernel);
  }
  EXPECT_EQ(variants, eligible);
  fs::remove_all(dir);
}

TEST_P(Corpus, TruncatedInputNeverCrashes) {
  std::string original = text();
  size_t step = std::max<size_t>(1, original.size() / 150);
  for (size_t cut = 0; cut < original.size(); cut += step) {
    std::string prefix = original.substr(0, cut);
    ParseResult r = parseModule(prefix);
    size_t opens = std::count(prefix.begin(), prefix.end(), '{');
    size_t closes = std::count(prefix.begin(), prefix.end(), '}');
    if (opens != closes) {
      EXPECT_FALSE(r.ok) << "accepted a prefix with unbalanced braces, cut " << cut;
    }
    if (r.ok) {
      ModuleTransformResult t = addSlicedKernels(r.module);
      EXPECT_TRUE(t.ok);
      printModule(t.module);
      ModuleTransformResult p = addPtbKernels(r.module);
      EXPECT_TRUE(p.ok);
      printModule(p.module);
    }
  }
}

std::string nameOf(const ::testing::TestParamInfo<CorpusModule>& info) {
  return info.param.unit + "_sm" + std::to_string(info.param.arch);
}
INSTANTIATE_TEST_SUITE_P(Modules, Corpus, ::testing::ValuesIn(kModules), nameOf);

// ---- the tool on other inputs -------------------------------------------------------------------

TEST(Tool, ReadsPtxFromAnElfObject) {
  std::string object = (kCorpus / "ineligible.o").string();
  CommandResult highest = runCommand(quote(kTool) + " list " + quote(object));
  ASSERT_EQ(highest.status, 0) << highest.output;
  EXPECT_NE(highest.output.find("i_smid ineligible reads %smid"), std::string::npos) << highest.output;
  EXPECT_NE(highest.output.find("i_block_group_ok eligible"), std::string::npos) << highest.output;

  fs::path dir = test::scratchDir("elf");
  std::string out = (dir / "out.ptx").string();
  CommandResult sm80 = runCommand(quote(kTool) + " transform --variant sliced --arch sm_80 " + quote(object) + " -o " + quote(out));
  ASSERT_EQ(sm80.status, 0) << sm80.output;
  std::string text = test::readText(out);
  EXPECT_NE(text.find(".target sm_80"), std::string::npos);
  EXPECT_NE(text.find("i_block_group_ok__tally_sliced"), std::string::npos);
  EXPECT_EQ(ptxasCheck(out, 80), "");
  EXPECT_NE(runCommand(quote(kTool) + " list --arch sm_75 " + quote(object)).status, 0);
  fs::remove_all(dir);
}

TEST(Tool, ListReportsPerVariantEligibility) {
  CommandResult r = runCommand(quote(kTool) + " list " + quote(kModules[2].file()));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("s_divergent_exit eligible\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("s_named_barrier eligible (sliced only: bar.sync with a thread count)\n"), std::string::npos)
      << r.output;
}

TEST(Tool, BadInputGivesOneLineAndNonZeroExit) {
  fs::path dir = test::scratchDir("bad");
  std::string original = test::readText(kModules[2].file());
  test::writeText(dir / "truncated.ptx", original.substr(0, original.size() / 2));
  test::writeText(dir / "garbage.bin", std::string("\x01\x02\x03\x04garbage\0\xff", 14));
  test::writeText(dir / "empty.ptx", "");
  test::writeText(dir / "fake.elf", std::string("\x7f" "ELF\x02\x01\x01", 7));
  std::string files[] = {(dir / "truncated.ptx").string(), (dir / "garbage.bin").string(), (dir / "empty.ptx").string(),
                         (dir / "fake.elf").string(), (dir / "missing.ptx").string(), dir.string()};
  for (const std::string& file : files) {
    for (const char* command : {" list ", " transform --variant sliced -o /dev/null ", " transform --variant ptb -o /dev/null "}) {
      CommandResult r = runCommand(quote(kTool) + command + quote(file));
      EXPECT_EQ(r.status, 1) << file << ": " << r.output;
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
  }
  fs::remove_all(dir);
}

TEST(Tool, UsageErrors) {
  EXPECT_EQ(runCommand(quote(kTool)).status, 2);
  EXPECT_EQ(runCommand(quote(kTool) + " frobnicate x.ptx").status, 2);
  EXPECT_EQ(runCommand(quote(kTool) + " transform --variant sliced " + quote(kModules[0].file())).status, 2);
  EXPECT_EQ(runCommand(quote(kTool) + " transform --variant tiled " + quote(kModules[0].file()) + " -o /dev/null").status, 2);
}

TEST(Tool, HandWrittenSnippetTransformsAndAssembles) {
  fs::path dir = test::scratchDir("snippet");
  test::writeText(dir / "k.ptx", R"(.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<6>;
	ld.param.u64 %rd1, [k_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	cvt.u64.u32 %rd3, %ctaid.y;
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r4, %nctaid.x;
	cvt.u64.u32 %rd4, %nctaid.z;
	mov.u32 %r2, %ctaid.z;
	mad.lo.s32 %r3, %r2, %r4, %r1;
	setp.ge.u32 %p1, %r1, %r4;
	@!%p1 bra $L__BB0_2;
	mul.wide.u32 %rd4, %r1, 4;
	add.s64 %rd5, %rd2, %rd4;
	st.global.u32 [%rd5+4], %r3;
$L__BB0_2:
	ret;
}
)");
  for (const char* variant : {"sliced", "ptb"}) {
    std::string out = (dir / (std::string(variant) + ".ptx")).string();
    CommandResult r = runCommand(quote(kTool) + " transform --variant " + variant + " " + quote((dir / "k.ptx").string()) +
                                 " -o " + quote(out));
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(test::readText(out).find(std::string("k__tally_") + variant + "("), std::string::npos) << variant;
    EXPECT_EQ(ptxasCheck(out, 80), "") << variant;
    EXPECT_EQ(ptxasCheck(out, 90), "") << variant;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tally::server::transform
