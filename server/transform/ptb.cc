#include "server/transform/ptb.h"

#include <map>
#include <vector>

#include "server/transform/parser.h"

namespace tally::server::transform {
namespace {

// ---- barriers ---------------------------------------------------------------------------------

enum class BarrierKind {
  kNone,         // not a CTA barrier (bar.warp.sync is a warp barrier)
  kSync,         // bar.sync a / barrier.sync a: every thread of the CTA, any barrier id
  kRedPopc,      // bar.red.popc.u32 d, a, {!}c
  kRedAnd,       // bar.red.and.pred d, a, {!}c
  kRedOr,        // bar.red.or.pred d, a, {!}c
  kUnsupported,  // see Barrier::why
};

struct Barrier {
  BarrierKind kind = BarrierKind::kNone;
  std::string why;  // kUnsupported
};

std::vector<std::string> splitDots(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    size_t dot = s.find('.', begin);
    out.push_back(s.substr(begin, dot - begin));
    if (dot == std::string::npos) return out;
    begin = dot + 1;
  }
}

bool isRegister(const Operand& op) {
  return op.tokens.size() == 1 && op.tokens[0].kind == TokenKind::kWord && op.tokens[0].text.starts_with("%");
}

// A predicate source `%p` or `!%p`.
bool isPredicateSource(const Operand& op) {
  if (op.tokens.size() == 2) return op.tokens[0].text == "!" && op.tokens[1].text.starts_with("%");
  return isRegister(op);
}

Barrier classify(const Statement& s) {
  if (s.kind != StatementKind::kInstruction) return {};
  std::vector<std::string> parts = splitDots(s.opcode);
  if (parts[0] != "bar" && parts[0] != "barrier") return {};
  std::vector<std::string> rest;  // without .cta / .aligned, which do not change the semantics here
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] != "cta" && parts[i] != "aligned") rest.push_back(parts[i]);
  }
  auto unsupported = [](std::string why) { return Barrier{BarrierKind::kUnsupported, std::move(why)}; };
  if (!rest.empty() && rest[0] == "warp") return {};
  size_t n = s.operands.size();
  if (!rest.empty() && rest[0] == "arrive") return unsupported(s.opcode + " (a producer/consumer barrier)");
  if (!rest.empty() && ((rest[0] == "sync" && n == 2) || (rest[0] == "red" && n == 4))) {
    return unsupported(s.opcode + " with a thread count");
  }
  if (!rest.empty() && rest[0] == "sync" && n == 1) return {BarrierKind::kSync, {}};
  if (rest.size() >= 2 && rest[0] == "red" && n == 3) {
    if (!isRegister(s.operands[0]) || !isPredicateSource(s.operands[2])) {
      return unsupported(s.opcode + " with an unsupported operand");
    }
    if (rest[1] == "popc") return {BarrierKind::kRedPopc, {}};
    if (rest[1] == "and") return {BarrierKind::kRedAnd, {}};
    if (rest[1] == "or") return {BarrierKind::kRedOr, {}};
  }
  return unsupported("unsupported barrier " + s.opcode);
}

bool isCtaBarrier(BarrierKind k) { return k != BarrierKind::kNone && k != BarrierKind::kUnsupported; }

bool isReturn(const Statement& s) {
  return s.kind == StatementKind::kInstruction && (s.opcode == "ret" || s.opcode == "ret.uni" || s.opcode == "exit");
}

// ---- scopes around barriers ---------------------------------------------------------------------

// nvcc emits __syncthreads_or/and/count as inline asm in a { } scope declaring its own
// predicates (which shadow the kernel's %p1, %p2):
//   { .reg .pred %p1; .reg .pred %p2; setp.ne.u32 %p1, %r9, 0; bar.red.or.pred %p2, 0, %p1; selp ...; }
// A label inside a scope cannot be a branch target from outside it, so the dispatcher could
// not resume there. Such scopes are flattened: their registers get function-unique names
// (%tally_b<scope>_<name>), their uses inside the scope are renamed, and the braces go. Only
// scopes that contain a CTA barrier, declare nothing but registers and hold no nested scope.
std::optional<std::string> flattenBarrierScopes(std::vector<Statement>& body) {
  std::vector<Statement> out;
  int scopes = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i].kind != StatementKind::kScopeOpen) {
      if (body[i].kind == StatementKind::kScopeClose) return "unbalanced { } scopes";
      out.push_back(std::move(body[i]));
      continue;
    }
    // Find the matching close and whether the scope needs flattening.
    size_t close = i + 1;
    int depth = 1;
    bool barrier = false;
    bool nested = false;
    for (; close < body.size(); ++close) {
      StatementKind k = body[close].kind;
      if (k == StatementKind::kScopeOpen) ++depth, nested = true;
      if (k == StatementKind::kScopeClose && --depth == 0) break;
      barrier = barrier || isCtaBarrier(classify(body[close]).kind);
    }
    if (close == body.size()) return "unbalanced { } scopes";
    if (!barrier) {
      for (size_t j = i; j <= close; ++j) out.push_back(std::move(body[j]));
      i = close;
      continue;
    }
    if (nested) return "CTA barrier inside nested { } scopes";
    std::string prefix = "%tally_b" + std::to_string(scopes++) + "_";
    std::map<std::string, std::string> renamed;  // declared name (a range's base too) -> new name
    for (size_t j = i + 1; j < close; ++j) {
      Statement& s = body[j];
      if (s.kind != StatementKind::kDirective) continue;
      if (s.tokens.empty() || s.tokens[0].text != ".reg") return "CTA barrier inside a { } scope declaring " + s.tokens[0].text;
      for (Token& t : s.tokens) {
        if (t.kind != TokenKind::kWord || !t.text.starts_with("%")) continue;
        std::string name = prefix + t.text.substr(1);
        renamed[t.text] = name;
        t.text = name;
      }
    }
    auto rename = [&](std::string& name) {
      if (auto it = renamed.find(name); it != renamed.end()) {
        name = it->second;
        return;
      }
      // %p3 declared through a range %p<4>: base + digits.
      size_t digits = name.find_last_not_of("0123456789") + 1;
      if (digits == name.size() || digits == 0) return;
      if (auto it = renamed.find(name.substr(0, digits)); it != renamed.end()) name = it->second + name.substr(digits);
    };
    for (size_t j = i + 1; j < close; ++j) {
      Statement& s = body[j];
      if (!s.guard.empty()) rename(s.guard);
      for (Operand& op : s.operands) {
        for (Token& t : op.tokens) {
          if (t.kind == TokenKind::kWord) rename(t.text);
        }
      }
      out.push_back(std::move(s));
    }
    i = close;
  }
  body = std::move(out);
  return std::nullopt;
}

// ---- the generated code -----------------------------------------------------------------------

const std::vector<std::string_view> kExtraParams{".param .u32 __tally_grid_x", ".param .u32 __tally_grid_y",
                                                 ".param .u32 __tally_grid_z", ".param .u64 __tally_progress",
                                                 ".param .u64 __tally_retreat", ".param .u32 __tally_chunk"};

// Declarations, then the setup run once per worker. __tally_ptb_slot is the claim broadcast:
// two 8-byte slots, used alternately (see kClaim).
constexpr const char* kDeclarations = R"(
.reg .pred %tally_leader, %tally_stop, %tally_live, %tally_vote, %tally_any_live;
.reg .b32 %tally_flag, %tally_slot, %tally_resume, %tally_red, %tally_chunk, %tally_chunk_left;
.reg .b64 %tally_total, %tally_progress, %tally_retreat, %tally_claimed, %tally_chunk_wide;
.shared .align 16 .b8 __tally_ptb_slot[16];
)";

constexpr const char* kSetup = R"(
ld.param.u32 %tally_nctaid_x, [__tally_grid_x];
ld.param.u32 %tally_nctaid_y, [__tally_grid_y];
ld.param.u32 %tally_nctaid_z, [__tally_grid_z];
mul.wide.u32 %tally_total, %tally_nctaid_x, %tally_nctaid_y;
cvt.u64.u32 %tally_u, %tally_nctaid_z;
mul.lo.u64 %tally_total, %tally_total, %tally_u;
ld.param.u64 %tally_progress, [__tally_progress];
cvta.to.global.u64 %tally_progress, %tally_progress;
ld.param.u64 %tally_retreat, [__tally_retreat];
cvta.to.global.u64 %tally_retreat, %tally_retreat;
ld.param.u32 %tally_chunk, [__tally_chunk];
max.u32 %tally_chunk, %tally_chunk, 1;
cvt.u64.u32 %tally_chunk_wide, %tally_chunk;
mov.u32 %tally_chunk_left, 0;
mov.u32 %tally_s, %tid.x;
mov.u32 %tally_flag, %tid.y;
or.b32 %tally_s, %tally_s, %tally_flag;
mov.u32 %tally_flag, %tid.z;
or.b32 %tally_s, %tally_s, %tally_flag;
setp.eq.u32 %tally_leader, %tally_s, 0;
mov.u32 %tally_slot, __tally_ptb_slot;
)";

// The claim loop head, reached once per logical block by every thread of the worker.
//
// The leader reads the retreat flag *before* claiming: when it is raised nothing is claimed, so
// the counter only ever counts blocks some worker has taken and will run to the end; a
// relaunch resumes from it with no other bookkeeping. (Past the end of the grid each worker's
// last claim still adds to it, so the blocks done are min(counter, total).)
//
// A claim takes __tally_chunk consecutive blocks: with blocks of a few microseconds or less
// the one global counter, not the work, would limit the kernel's speed. The flag is read
// between chunks, so a retreat waits for at most a chunk per worker; the launcher picks the
// chunk (1 for long blocks).
//
// The claimed index (or `total`, meaning stop) is broadcast through shared memory. The slot
// must not be overwritten before every thread has read it: without care, in a kernel with no
// barrier of its own the leader can finish the logical block and store the next claim while a
// slower warp has passed the barrier but not yet loaded the current one (the race of the
// original Tally, which reused one global slot per worker). Instead of a second barrier after
// the read, the two slots alternate: the leader writes slot i+1 while others may still read
// slot i, and it can write slot i again only after the next barrier, which every thread
// reaches after its read. One barrier per logical block.
//
// The barrier is the non-aligned barrier.sync: threads reach it from different `ret`s.
constexpr const char* kClaim = R"(
$__tally_next:
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

// Barrier-aware rewrite (kernels with CTA barriers). A thread that returns from the logical
// block is "done" (%tally_live false) and waits in the dispatcher below; a live thread reaching
// a barrier sets %tally_resume to the barrier's number and enters it too. Every barrier of the
// kernel is thus this one barrier instruction, which the done threads keep attending (voting
// false for bar.red) until no thread of the CTA is live; then all go to the next claim together.
// A live thread continues after its own barrier through the branch table. The second barrier
// (only in kernels with bar.red) reduces the live threads' votes: popc, from which `or` (> 0)
// and `and` (popc of the negations == 0) follow. Non-aligned barriers, as warps diverge here.
constexpr const char* kDone = R"(
$__tally_done:
mov.pred %tally_live, 0;
mov.pred %tally_vote, 0;
$__tally_sync:
barrier.red.or.pred %tally_any_live, 0, %tally_live;
)";
constexpr const char* kVote = "@%tally_any_live barrier.red.popc.u32 %tally_red, 0, %tally_vote;\n";
constexpr const char* kDispatch = R"(
@!%tally_any_live bra $__tally_next;
@!%tally_live bra $__tally_sync;
brx.idx %tally_resume, $__tally_resume_table;
)";

struct Emitter {
  std::vector<Statement> out;
  std::string error;

  void code(const std::string& text) {
    StatementsResult parsed = parseStatements(text);
    if (!parsed.ok) {  // a bug in the generated text, caught by the unit tests
      if (error.empty()) error = "internal error in the PTB code: " + parsed.error;
      return;
    }
    out.insert(out.end(), parsed.statements.begin(), parsed.statements.end());
  }
  // `bra target` under the guard of `s` (negated if `negate`).
  void branch(const Statement& s, const std::string& target, bool negate = false) {
    size_t at = out.size();
    code("bra " + target + ";");
    if (out.size() == at + 1) {
      out.back().guard = s.guard;
      out.back().guardNegated = s.guard.empty() ? false : s.guardNegated != negate;
    }
  }
};

// A kernel barrier number k becomes: set the vote (bar.red), enter the dispatcher, and on the
// way back write the reduction's result.
void emitBarrier(Emitter& e, const Statement& s, BarrierKind kind, size_t k) {
  std::string n = std::to_string(k);
  if (!s.guard.empty()) e.branch(s, "$__tally_skip_" + n, /*negate=*/true);
  std::string dest;
  if (kind != BarrierKind::kSync) {
    dest = s.operands[0].tokens[0].text;
    const Operand& c = s.operands[2];
    bool negated = c.tokens.size() == 2;
    std::string p = c.tokens.back().text;
    bool flip = negated != (kind == BarrierKind::kRedAnd);  // and(c) = !or(!c)
    e.code((flip ? "not.pred %tally_vote, " : "mov.pred %tally_vote, ") + p + ";");
  }
  e.code("mov.u32 %tally_resume, " + n + ";\nbra $__tally_sync;\n$__tally_resume_" + n + ":");
  if (kind == BarrierKind::kRedPopc) e.code("mov.u32 " + dest + ", %tally_red;");
  if (kind == BarrierKind::kRedOr) e.code("setp.ne.u32 " + dest + ", %tally_red, 0;");
  if (kind == BarrierKind::kRedAnd) e.code("setp.eq.u32 " + dest + ", %tally_red, 0;");
  if (!s.guard.empty()) e.code("$__tally_skip_" + n + ":");
}

}  // namespace

std::optional<std::string> ptbObstacle(const Function& f, bool isKernel) {
  for (const Statement& s : f.body) {
    Barrier b = classify(s);
    if (!isKernel) {
      if (b.kind != BarrierKind::kNone) return "has a CTA barrier (" + s.opcode + ")";
      if (s.kind == StatementKind::kInstruction && s.opcode == "exit") return "exits (exit)";
      continue;
    }
    if (b.kind == BarrierKind::kUnsupported) return b.why;
  }
  if (!isKernel) return std::nullopt;
  std::vector<Statement> body = f.body;
  return flattenBarrierScopes(body);
}

VariantResult makePtbKernel(const Function& kernel) {
  VariantResult result;
  Function f = startVariant(kernel, kPtbSuffix, kExtraParams, result.error);
  if (!result.error.empty()) return result;
  if (std::optional<std::string> why = ptbObstacle(kernel, true)) {
    result.error = *why;
    return result;
  }
  flattenBarrierScopes(f.body);  // cannot fail: ptbObstacle ran it
  bool barriers = false;
  bool reductions = false;
  for (const Statement& s : f.body) {
    BarrierKind k = classify(s).kind;
    barriers = barriers || isCtaBarrier(k);
    reductions = reductions || (isCtaBarrier(k) && k != BarrierKind::kSync);
  }
  // Without barriers a finished thread simply goes to the next claim; with them it is done
  // and attends the remaining barriers of the logical block from the dispatcher.
  const std::string finished = barriers ? "$__tally_done" : "$__tally_next";

  size_t start = prologuePosition(f.body);
  Emitter e;
  e.out.assign(f.body.begin(), f.body.begin() + static_cast<long>(start));
  e.code(std::string(kBlockIndexRegisters) + kDeclarations + kSetup + kClaim + kDecomposeLinearIndex);
  if (barriers) e.code("mov.pred %tally_live, 1;");
  size_t resumePoints = 0;
  for (size_t i = start; i < f.body.size(); ++i) {
    const Statement& s = f.body[i];
    BarrierKind k = classify(s).kind;
    if (isReturn(s)) {
      e.branch(s, finished);
    } else if (isCtaBarrier(k)) {
      emitBarrier(e, s, k, resumePoints++);
    } else {
      e.out.push_back(s);
    }
  }
  const Statement& last = e.out.back();
  bool fallsThrough = !(last.kind == StatementKind::kInstruction && last.guard.empty() && last.opcode.starts_with("bra"));
  if (fallsThrough) e.code("bra " + finished + ";");  // a body that falls off its end
  if (barriers) {
    std::string table = "$__tally_resume_table:\n.branchtargets ";
    for (size_t k = 0; k < resumePoints; ++k) table += (k ? ", $__tally_resume_" : "$__tally_resume_") + std::to_string(k);
    e.code(table + ";");
    e.code(std::string(kDone) + (reductions ? kVote : "") + kDispatch);
  }
  if (!e.error.empty()) {
    result.error = e.error;
    return result;
  }
  f.body = std::move(e.out);
  return finishVariant(std::move(f));
}

ModuleTransformResult addPtbKernels(const Module& module) {
  return addKernelVariants(
      module, kPtbSuffix,
      [](const Eligibility& e) { return !e.eligible ? e.reason : e.ptbEligible ? std::string() : e.ptbReason; },
      makePtbKernel);
}

}  // namespace tally::server::transform
