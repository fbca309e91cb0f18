// A kernel is eligible for slicing and PTB when running its logical blocks in other physical
// blocks, in several launches, cannot change what it computes. That rules out kernels
// that talk to other blocks of the same launch (grid sync, clusters, programmatic dependent
// launch) or observe where/in which launch they run (%smid, %gridid). PTB further needs every
// barrier in a form the barrier-aware rewrite handles (ptb.h). See docs/transform.md.
#include "server/transform/eligibility.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "server/transform/ptb.h"

namespace tally::server::transform {
namespace {

bool startsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Why an operand token (a register or symbol) makes the code ineligible, if it does.
std::optional<std::string> tokenReason(const Token& t) {
  if (t.kind != TokenKind::kWord || t.text.empty() || t.text[0] != '%') return std::nullopt;
  const std::string& r = t.text;
  if (r == "%smid" || r == "%nsmid" || r == "%gridid") return "reads " + r + " (depends on where or in which launch it runs)";
  if (startsWith(r, "%envreg")) return "cooperative-groups grid sync (reads " + r + ", the cooperative launch workspace)";
  if (startsWith(r, "%cluster") || startsWith(r, "%nclusterid") || r == "%is_explicit_cluster") return "cluster kernel (reads " + r + ")";
  if (r == "%ctaid" || r == "%nctaid") return "reads " + r + " as a vector (not supported)";
  return std::nullopt;
}

std::optional<std::string> opcodeReason(const std::string& op) {
  if (startsWith(op, "griddepcontrol")) return "programmatic dependent launch (" + op + ")";
  if (startsWith(op, "mapa") || startsWith(op, "barrier.cluster") || op.find("::cluster") != std::string::npos) {
    return "cluster kernel (" + op + ")";
  }
  return std::nullopt;
}

std::optional<std::string> attributeReason(const Function& f) {
  for (const Token& t : f.attributes) {
    if (t.text == ".reqnctapercluster" || t.text == ".explicitcluster" || t.text == ".maxclusterrank") {
      return "cluster kernel (" + t.text + ")";
    }
  }
  return std::nullopt;
}

bool readsBlockIndex(const Token& t) {
  return t.kind == TokenKind::kWord && (startsWith(t.text, "%ctaid") || startsWith(t.text, "%nctaid"));
}

// Reasons found in one function's own statements (callees are handled by the caller).
struct FunctionFacts {
  std::optional<std::string> reason;
  std::string blockIndexRead;  // first %ctaid/%nctaid read, for .func callees
};

FunctionFacts scan(const Function& f) {
  FunctionFacts facts;
  if (!f.bodyError.empty()) {
    facts.reason = "unparseable body: " + f.bodyError;
    return facts;
  }
  if (auto r = attributeReason(f)) facts.reason = r;
  for (const Statement& s : f.body) {
    if (facts.reason) break;
    if (s.kind == StatementKind::kInstruction) {
      if (auto r = opcodeReason(s.opcode)) facts.reason = r;
      for (const Operand& op : s.operands) {
        for (const Token& t : op.tokens) {
          if (auto r = tokenReason(t); r && !facts.reason) facts.reason = r;
          if (readsBlockIndex(t) && facts.blockIndexRead.empty()) facts.blockIndexRead = t.text;
        }
      }
    } else {
      for (const Token& t : s.tokens) {  // e.g. .shared::cluster declarations
        if (t.text.find("::cluster") != std::string::npos && !facts.reason) facts.reason = "cluster kernel (" + t.text + ")";
      }
    }
  }
  return facts;
}

// Every function a kernel may call: any mention of a function's name (direct calls, and
// addresses taken for indirect calls). An indirect call through a register reaches every
// function whose address is taken, which mentions cover.
std::vector<const Function*> reachable(const std::map<std::string, const Function*>& functions, const Function& kernel) {
  std::vector<const Function*> out;
  std::set<std::string> seen{kernel.name};
  std::vector<const Function*> work{&kernel};
  while (!work.empty()) {
    const Function* f = work.back();
    work.pop_back();
    for (const Statement& s : f->body) {
      for (const Operand& op : s.operands) {
        for (const Token& t : op.tokens) {
          auto it = functions.find(t.text);
          if (t.kind != TokenKind::kWord || it == functions.end() || !seen.insert(t.text).second) continue;
          out.push_back(it->second);
          work.push_back(it->second);
        }
      }
    }
  }
  return out;
}

std::map<std::string, const Function*> functionsByName(const Module& module) {
  std::map<std::string, const Function*> out;
  for (const Item& item : module.items) {
    if (item.kind != ItemKind::kFunction || item.function.isEntry) continue;
    const Function* f = &item.function;
    auto [it, inserted] = out.emplace(f->name, f);
    if (!inserted && f->hasBody) it->second = f;  // prefer the definition over a prototype
  }
  return out;
}

// The barrier-aware rewrite of PTB uses the non-aligned barrier.sync / barrier.red (sm_70+).
constexpr unsigned kPtbMinArch = 70;

bool usesGridDependency(const Function& f) {
  return std::any_of(f.body.begin(), f.body.end(), [](const Statement& s) {
    return s.kind == StatementKind::kInstruction && startsWith(s.opcode, "griddepcontrol");
  });
}

Eligibility analyze(const std::map<std::string, const Function*>& functions, unsigned arch, const Function& kernel) {
  Eligibility e;
  e.kernel = kernel.name;
  const std::vector<const Function*> callees = reachable(functions, kernel);
  e.usesGridDependency =
      usesGridDependency(kernel) || std::any_of(callees.begin(), callees.end(), [](const Function* f) {
        return usesGridDependency(*f);
      });
  FunctionFacts own = scan(kernel);
  if (own.reason) {
    e.reason = *own.reason;
    return e;
  }
  std::optional<std::string> ptbReason = ptbObstacle(kernel, /*isKernel=*/true);
  if (!ptbReason && arch != 0 && arch < kPtbMinArch) {
    ptbReason = "PTB needs sm_" + std::to_string(kPtbMinArch) + " or newer (.target sm_" + std::to_string(arch) + ")";
  }
  for (const Function* callee : callees) {
    if (!callee->hasBody) continue;  // external (vprintf, libdevice-like): cannot read our sregs
    if (!ptbReason) {
      if (std::optional<std::string> why = ptbObstacle(*callee, /*isKernel=*/false)) {
        ptbReason = "calls " + callee->name + ", which " + *why;
      }
    }
    FunctionFacts facts = scan(*callee);
    if (facts.reason) {
      e.reason = "calls " + callee->name + ": " + *facts.reason;
      return e;
    }
    if (!facts.blockIndexRead.empty()) {
      e.reason = "calls " + callee->name + ", which reads " + facts.blockIndexRead +
                 " (rewriting device functions is not supported yet)";
      return e;
    }
  }
  e.eligible = true;
  e.ptbEligible = !ptbReason;
  if (ptbReason) e.ptbReason = *ptbReason;
  return e;
}

}  // namespace

unsigned targetArch(const Module& module) {
  for (const Item& item : module.items) {
    if (item.kind != ItemKind::kLineDirective || item.tokens.size() < 2 || item.tokens[0].text != ".target") continue;
    const std::string& t = item.tokens[1].text;
    if (!startsWith(t, "sm_")) return 0;
    unsigned arch = 0;
    for (size_t i = 3; i < t.size() && i < 7 && t[i] >= '0' && t[i] <= '9'; ++i) arch = arch * 10 + (t[i] - '0');
    return arch;
  }
  return 0;
}

Eligibility analyzeKernel(const Module& module, const Function& kernel) {
  return analyze(functionsByName(module), targetArch(module), kernel);
}

std::vector<Eligibility> analyzeModule(const Module& module) {
  auto functions = functionsByName(module);
  unsigned arch = targetArch(module);
  std::vector<Eligibility> out;
  for (const Item& item : module.items) {
    if (item.kind == ItemKind::kFunction && item.function.isEntry && item.function.hasBody) {
      out.push_back(analyze(functions, arch, item.function));
    }
  }
  return out;
}

}  // namespace tally::server::transform
