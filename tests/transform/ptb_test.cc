// The PTB variant on small hand-written PTX (golden tests): the claim loop, the redirection of
// every `ret`/`exit`, the barrier-aware rewrite, and what is refused.
#include <gtest/gtest.h>

#include "server/gpu/ptb_helpers_ptx.h"
#include "server/transform/eligibility.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "server/transform/ptb.h"
#include "server/transform/slice.h"
#include "test_util.h"

namespace tally::server::transform {
namespace {

namespace fs = std::filesystem;

constexpr const char* kHeader = ".version 8.0\n.target sm_80\n.address_size 64\n";

// No barrier: an early (predicated) return, a plain one, and a device function whose `ret`
// must stay.
constexpr const char* kNoBarrier = R"(
.func (.param .b32 r) twice(.param .b32 x)
{
	.reg .b32 %r<3>;
	ld.param.b32 %r1, [x];
	add.s32 %r2, %r1, %r1;
	st.param.b32 [r], %r2;
	ret;
}
.visible .entry k(
	.param .u64 k_param_0,
	.param .u32 k_param_1
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_0];
	ld.param.u32 %r1, [k_param_1];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %nctaid.y;
	setp.ge.u32 %p1, %r2, %r1;
	@%p1 ret;
	{
	.param .b32 param0;
	st.param.b32 [param0], %r2;
	.param .b32 retval0;
	call.uni (retval0), twice, (param0);
	ld.param.b32 %r4, [retval0];
	}
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r2, 4;
	add.s64 %rd2, %rd2, %rd3;
	st.global.u32 [%rd2], %r4;
	ret;
}
)";

// Early return before a __syncthreads().
constexpr const char* kEarlyReturnSync = R"(
.visible .entry s(
	.param .u64 s_param_0,
	.param .u32 s_param_1
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .b64 %rd<4>;
	.shared .align 4 .b8 sh[1024];
	ld.param.u64 %rd1, [s_param_0];
	ld.param.u32 %r1, [s_param_1];
	mov.u32 %r2, %tid.x;
	setp.ge.u32 %p1, %r2, %r1;
	@%p1 bra $L__BB0_2;
	shl.b32 %r3, %r2, 2;
	mov.u32 %r4, sh;
	add.s32 %r4, %r4, %r3;
	st.shared.u32 [%r4], %r2;
	bar.sync 0;
	ld.shared.u32 %r5, [sh];
	cvta.to.global.u64 %rd2, %rd1;
	st.global.u32 [%rd2], %r5;
$L__BB0_2:
	ret;
}
)";

// __syncthreads_or/count/and as nvcc emits them (inline asm scopes), plus the other plain forms.
constexpr const char* kReductions = R"(
.visible .entry r(
	.param .u64 r_param_0
)
{
	.reg .pred %p<3>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [r_param_0];
	mov.u32 %r1, %tid.x;
	and.b32 %r2, %r1, 1;
	{
	.reg .pred %p1;
	.reg .pred %p2;
	setp.ne.u32 %p1, %r2, 0;
	bar.red.or.pred %p2, 0, %p1;
	selp.u32 %r3, 1, 0, %p2;
	}
	setp.eq.u32 %p1, %r2, 0;
	bar.red.popc.u32 %r4, 0, !%p1;
	bar.red.and.pred %p2, 0, %p1;
	selp.u32 %r5, 1, 0, %p2;
	barrier.sync 0;
	bar.sync 1;
	@%p1 bar.sync 0;
	add.s32 %r6, %r3, %r4;
	add.s32 %r6, %r6, %r5;
	cvta.to.global.u64 %rd2, %rd1;
	st.global.u32 [%rd2], %r6;
	ret;
}
)";

Module parse(const std::string& text) {
  ParseResult r = parseModule(std::string(kHeader) + text);
  EXPECT_TRUE(r.ok) << r.error;
  return r.module;
}

const Function& entry(const Module& m) {
  for (const Item& item : m.items) {
    if (item.kind == ItemKind::kFunction && item.function.isEntry) return item.function;
  }
  throw std::runtime_error("no kernel");
}

std::string bodyText(const Function& f) {
  std::string out;
  for (const Statement& s : f.body) out += printStatement(s) + "\n";
  return out;
}

// The statements after the claim loop's decomposition of the claimed index.
std::string bodyAfterClaim(const Function& f) {
  std::string all = bodyText(f);
  std::string marker = "$__tally_decomposed:\n";
  size_t at = all.find(marker);
  EXPECT_NE(at, std::string::npos);
  return at == std::string::npos ? "" : all.substr(at + marker.size());
}

std::string ptxasCheck(const std::string& text) {
  fs::path dir = test::scratchDir("ptb_unit");
  test::writeText(dir / "m.ptx", text);
  test::CommandResult r = test::runCommand(test::quote(TALLY_TRANSFORM_PTXAS) + " -arch=sm_80 " +
                                           test::quote((dir / "m.ptx").string()) + " -o /dev/null");
  fs::remove_all(dir);
  return r.status == 0 ? "" : r.output.empty() ? "ptxas failed" : r.output;
}

// The module with the PTB variants, which must assemble.
Module transformed(const std::string& text, int expectedAdded = 1) {
  ModuleTransformResult r = addPtbKernels(parse(text));
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.added, expectedAdded);
  std::string printed = printModule(r.module);
  EXPECT_EQ(ptxasCheck(printed), "") << printed;
  return r.module;
}

const Function& variant(const Module& m, const std::string& name) {
  for (const Item& item : m.items) {
    if (item.kind == ItemKind::kFunction && item.function.name == name) return item.function;
  }
  throw std::runtime_error("no " + name);
}

TEST(Ptb, ClaimLoopGolden) {
  Module m = transformed(kNoBarrier);
  const Function& f = variant(m, "k__tally_ptb");
  std::string all = bodyText(f);
  constexpr const char* kClaim = R"($__tally_next:
@!%tally_leader bra $__tally_claimed;
setp.ne.u32 %tally_stop, %tally_chunk_left, 0;
@%tally_stop bra $__tally_in_chunk;
ld.volatile.global.u32 %tally_flag, [%tally_retreat];
setp.ne.u32 %tally_stop, %tally_flag, 0;
mov.u64 %tally_claimed, %tally_total;
@!%tally_stop atom.global.add.u64 %tally_claimed, [%tally_progress], %tally_chunk_wide;
@!%tally_stop sub.u32 %tally_chunk_left, %tally_chunk, 1;
bra.uni $__tally_publish;
$__tally_in_chunk:
add.u64 %tally_claimed, %tally_claimed, 1;
sub.u32 %tally_chunk_left, %tally_chunk_left, 1;
$__tally_publish:
st.shared.u64 [%tally_slot], %tally_claimed;
$__tally_claimed:
barrier.sync 0;
ld.shared.u64 %tally_linear, [%tally_slot];
xor.b32 %tally_slot, %tally_slot, 8;
setp.ge.u64 %tally_stop, %tally_linear, %tally_total;
@%tally_stop exit;
)";
  EXPECT_NE(all.find(kClaim), std::string::npos) << all;
  // The retreat flag is read before the claim, by the leader (thread 0, 0, 0) only.
  EXPECT_LT(all.find("ld.volatile.global.u32 %tally_flag"), all.find("atom.global.add.u64"));
  EXPECT_NE(all.find("setp.eq.u32 %tally_leader, %tally_s, 0;"), std::string::npos);
  EXPECT_NE(all.find(".shared .align 16 .b8 __tally_ptb_slot[16];"), std::string::npos);
  // The physical index is never read; the original grid comes from the parameters.
  EXPECT_EQ(all.find("%ctaid"), std::string::npos);
  EXPECT_EQ(all.find("%nctaid"), std::string::npos);
  EXPECT_NE(all.find("ld.param.u32 %tally_nctaid_y, [__tally_grid_y];"), std::string::npos);
}

TEST(Ptb, EveryReturnGoesToTheNextClaimAndFuncsAreUntouched) {
  Module original = parse(kNoBarrier);
  Module m = transformed(kNoBarrier);
  EXPECT_EQ(bodyAfterClaim(variant(m, "k__tally_ptb")), R"(ld.param.u64 %rd1, [k_param_0];
ld.param.u32 %r1, [k_param_1];
mov.u32 %r2, %tally_ctaid_x;
mov.u32 %r3, %tally_nctaid_y;
setp.ge.u32 %p1, %r2, %r1;
@%p1 bra $__tally_next;
{
.param .b32 param0;
st.param.b32 [param0], %r2;
.param .b32 retval0;
call.uni (retval0), twice, (param0);
ld.param.b32 %r4, [retval0];
}
cvta.to.global.u64 %rd2, %rd1;
mul.wide.u32 %rd3, %r2, 4;
add.s64 %rd2, %rd2, %rd3;
st.global.u32 [%rd2], %r4;
bra $__tally_next;
)");
  EXPECT_EQ(bodyText(variant(m, "twice")), bodyText(variant(original, "twice")));
  EXPECT_EQ(bodyText(variant(m, "k")), bodyText(variant(original, "k")));
  std::vector<std::string> names;
  for (const Param& p : variant(m, "k__tally_ptb").params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"k_param_0", "k_param_1", "__tally_grid_x", "__tally_grid_y",
                                             "__tally_grid_z", "__tally_progress", "__tally_retreat", "__tally_chunk"}));
}

TEST(Ptb, EarlyReturnBeforeBarrierGolden) {
  Module m = transformed(kEarlyReturnSync);
  EXPECT_EQ(bodyAfterClaim(variant(m, "s__tally_ptb")), R"(mov.pred %tally_live, 1;
ld.param.u64 %rd1, [s_param_0];
ld.param.u32 %r1, [s_param_1];
mov.u32 %r2, %tid.x;
setp.ge.u32 %p1, %r2, %r1;
@%p1 bra $L__BB0_2;
shl.b32 %r3, %r2, 2;
mov.u32 %r4, sh;
add.s32 %r4, %r4, %r3;
st.shared.u32 [%r4], %r2;
mov.u32 %tally_resume, 0;
bra $__tally_sync;
$__tally_resume_0:
ld.shared.u32 %r5, [sh];
cvta.to.global.u64 %rd2, %rd1;
st.global.u32 [%rd2], %r5;
$L__BB0_2:
bra $__tally_done;
$__tally_resume_table:
.branchtargets $__tally_resume_0;
$__tally_done:
mov.pred %tally_live, 0;
mov.pred %tally_vote, 0;
$__tally_sync:
barrier.red.or.pred %tally_any_live, 0, %tally_live;
@!%tally_any_live bra $__tally_next;
@!%tally_live bra $__tally_sync;
brx.idx %tally_resume, $__tally_resume_table;
)");
}

TEST(Ptb, BarrierReductionsAndOtherFormsGolden) {
  Module m = transformed(kReductions);
  std::string after = bodyAfterClaim(variant(m, "r__tally_ptb"));
  EXPECT_NE(after.find(R"(and.b32 %r2, %r1, 1;
.reg .pred %tally_b0_p1;
.reg .pred %tally_b0_p2;
setp.ne.u32 %tally_b0_p1, %r2, 0;
mov.pred %tally_vote, %tally_b0_p1;
mov.u32 %tally_resume, 0;
bra $__tally_sync;
$__tally_resume_0:
setp.ne.u32 %tally_b0_p2, %tally_red, 0;
selp.u32 %r3, 1, 0, %tally_b0_p2;
setp.eq.u32 %p1, %r2, 0;
not.pred %tally_vote, %p1;
mov.u32 %tally_resume, 1;
bra $__tally_sync;
$__tally_resume_1:
mov.u32 %r4, %tally_red;
not.pred %tally_vote, %p1;
mov.u32 %tally_resume, 2;
bra $__tally_sync;
$__tally_resume_2:
setp.eq.u32 %p2, %tally_red, 0;
selp.u32 %r5, 1, 0, %p2;
mov.u32 %tally_resume, 3;
bra $__tally_sync;
$__tally_resume_3:
mov.u32 %tally_resume, 4;
bra $__tally_sync;
$__tally_resume_4:
@!%p1 bra $__tally_skip_5;
mov.u32 %tally_resume, 5;
bra $__tally_sync;
$__tally_resume_5:
$__tally_skip_5:
add.s32 %r6, %r3, %r4;
)"),
            std::string::npos)
      << after;
  // With bar.red, done threads vote (false) in a second reduction.
  EXPECT_NE(after.find(R"(barrier.red.or.pred %tally_any_live, 0, %tally_live;
@%tally_any_live barrier.red.popc.u32 %tally_red, 0, %tally_vote;
)"),
            std::string::npos)
      << after;
  // The kernel's own barriers are all gone: only the dispatcher's and the claim's remain.
  EXPECT_EQ(after.find("bar."), std::string::npos) << after;
}

struct PtbCase {
  const char* code;    // in a kernel body (declared: %p<3>, %r<4>)
  const char* reason;  // nullptr: PTB-eligible
};

TEST(Ptb, EligibilityOfBarrierForms) {
  const PtbCase cases[] = {
      {"bar.sync 0;", nullptr},
      {"bar.sync %r1;", nullptr},
      {"barrier.sync.aligned 2;", nullptr},
      {"bar.cta.sync 0;", nullptr},
      {"bar.warp.sync -1;", nullptr},
      {"@!%p1 ret;\nbar.sync 0;\n@%p1 exit;", nullptr},
      {"bar.red.popc.u32 %r1, 0, %p1;", nullptr},
      {"bar.sync 1, 64;", "bar.sync with a thread count"},
      {"barrier.sync 0, %r2;", "barrier.sync with a thread count"},
      {"bar.red.or.pred %p2, 1, 64, %p1;", "bar.red.or.pred with a thread count"},
      {"bar.arrive 3, 128;", "bar.arrive (a producer/consumer barrier)"},
      {"barrier.cta.arrive.aligned 1, 64;", "barrier.cta.arrive.aligned (a producer/consumer barrier)"},
      {"bar.red.popc.u32 %r1, 0, 1;", "bar.red.popc.u32 with an unsupported operand"},
      {"{\n{\nbar.sync 0;\n}\n}", "CTA barrier inside nested { } scopes"},
      {"{\n.local .b32 x;\nbar.sync 0;\n}", "CTA barrier inside a { } scope declaring .local"},
  };
  for (const PtbCase& c : cases) {
    Module m = parse(std::string(".visible .entry k()\n{\n.reg .pred %p<3>;\n.reg .b32 %r<4>;\n") + c.code +
                     "\nret;\n}\n");
    std::vector<Eligibility> e = analyzeModule(m);
    ASSERT_EQ(e.size(), 1u);
    EXPECT_TRUE(e[0].eligible) << c.code;
    if (c.reason == nullptr) {
      EXPECT_TRUE(e[0].ptbEligible) << c.code << ": " << e[0].ptbReason;
      ModuleTransformResult r = addPtbKernels(m);
      EXPECT_EQ(r.added, 1) << c.code;
      EXPECT_EQ(ptxasCheck(printModule(r.module)), "") << c.code;
    } else {
      EXPECT_FALSE(e[0].ptbEligible) << c.code;
      EXPECT_EQ(e[0].ptbReason, c.reason) << c.code;
      ModuleTransformResult r = addPtbKernels(m);
      EXPECT_EQ(r.added, 0) << c.code;
      ASSERT_EQ(r.skipped.size(), 1u);
      EXPECT_EQ(r.skipped[0], std::string("k: ") + c.reason);
      EXPECT_EQ(addSlicedKernels(m).added, 1) << c.code;  // slicing runs whole blocks: still fine
    }
  }
}

TEST(Ptb, CalleesWithBarriersOrExitAreRefused) {
  Module m = parse(R"(
.func f()
{
	bar.sync 0;
	ret;
}
.func g()
{
	exit;
}
.func h()
{
	bar.warp.sync -1;
	ret;
}
.visible .entry calls_f()
{
	call.uni f, ();
	ret;
}
.visible .entry calls_g()
{
	call.uni g, ();
	ret;
}
.visible .entry calls_h()
{
	call.uni h, ();
	ret;
}
)");
  std::vector<Eligibility> e = analyzeModule(m);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].ptbReason, "calls f, which has a CTA barrier (bar.sync)");
  EXPECT_EQ(e[1].ptbReason, "calls g, which exits (exit)");
  EXPECT_TRUE(e[2].ptbEligible) << e[2].ptbReason;
  for (const Eligibility& x : e) EXPECT_TRUE(x.eligible) << x.kernel;
}

TEST(Ptb, NeedsSm70ForNonAlignedBarriers) {
  ParseResult m = parseModule(".version 7.0\n.target sm_60\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n");
  ASSERT_TRUE(m.ok) << m.error;
  std::vector<Eligibility> e = analyzeModule(m.module);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_TRUE(e[0].eligible);
  EXPECT_EQ(e[0].ptbReason, "PTB needs sm_70 or newer (.target sm_60)");
  EXPECT_EQ(addPtbKernels(m.module).added, 0);
}

TEST(Ptb, ModuleGetsVariantsOnceAndNotForOtherVariants) {
  ModuleTransformResult sliced = addSlicedKernels(parse(kEarlyReturnSync));
  ASSERT_EQ(sliced.added, 1);
  ModuleTransformResult r = addPtbKernels(sliced.module);
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.added, 1);  // s__tally_sliced gets none
  std::vector<std::string> names;
  for (const Item& item : r.module.items) {
    if (item.kind == ItemKind::kFunction) names.push_back(item.function.name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"s", "s__tally_ptb", "s__tally_sliced"}));
  EXPECT_EQ(ptxasCheck(printModule(r.module)), "");
  EXPECT_EQ(addPtbKernels(r.module).added, 0);
}

TEST(Ptb, RefusesBrokenBodiesAndParameterClashes) {
  EXPECT_FALSE(makePtbKernel(entry(parse(".visible .entry k()\n{\nmov.u32 %r1 %r2\n}\n"))).ok);
  EXPECT_FALSE(makePtbKernel(entry(parse(".visible .entry k(.param .u64 __tally_retreat)\n{\nret;\n}\n"))).ok);
  VariantResult empty = makePtbKernel(entry(parse(".visible .entry k()\n{\n}\n")));
  ASSERT_TRUE(empty.ok) << empty.error;
  EXPECT_EQ(printStatement(empty.function.body.back()), "bra $__tally_next;");
}

}  // namespace
}  // namespace tally::server::transform

namespace tally::server::transform {
namespace {

// The helper kernels tallyd loads next to every PTB variant (retreat trigger, pause between
// runs) are hand-written PTX: they must assemble for the GPUs tallyd supports.
TEST(PtbHelpers, HandWrittenPtxAssembles) {
  for (const char* arch : {"sm_80", "sm_90"}) {
    fs::path dir = test::scratchDir("ptb_helpers");
    test::writeText(dir / "helpers.ptx", gpu::kPtbHelpersPtx);
    test::CommandResult r = test::runCommand(test::quote(TALLY_TRANSFORM_PTXAS) + " -arch=" + arch + " " +
                                             test::quote((dir / "helpers.ptx").string()) + " -o /dev/null");
    EXPECT_EQ(r.status, 0) << arch << ": " << r.output;
  }
}

}  // namespace
}  // namespace tally::server::transform
