#include "server/transform/printer.h"

namespace tally::server::transform {
namespace {

void appendParams(std::string& out, const std::vector<Param>& params, const char* separator) {
  for (size_t i = 0; i < params.size(); ++i) {
    if (i > 0) out += ",";
    out += separator;
    out += joinTokens(params[i].tokens);
  }
}

void printFunction(std::string& out, const Function& f) {
  std::string linkage = joinTokens(f.linkage);
  if (!linkage.empty()) out += linkage + " ";
  out += f.isEntry ? ".entry " : ".func ";
  if (f.hasReturns) {
    out += "(";
    appendParams(out, f.returns, " ");
    out += ") ";
  }
  out += f.name;
  if (f.hasParamList) {
    out += "(";
    appendParams(out, f.params, "\n\t");
    out += f.params.empty() ? ")" : "\n)";
  }
  if (!f.attributes.empty()) out += "\n" + joinTokens(f.attributes, true);
  if (!f.hasBody) {
    out += ";\n";
    return;
  }
  out += "\n{\n";
  if (!f.bodyError.empty()) {
    out += joinTokens(f.rawBody, true) + "\n";
  } else {
    for (const Statement& s : f.body) {
      if (s.kind != StatementKind::kLabel) out += "\t";
      out += printStatement(s);
      out += "\n";
    }
  }
  out += "}\n";
}

}  // namespace

std::string joinTokens(const Tokens& tokens, bool keepLines) {
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const Token& t = tokens[i];
    if (i > 0 && keepLines && t.lineBefore) {
      out += "\n";
    } else if (i > 0 && t.spaceBefore && tokens[i - 1].text != "(" && t.text != ")") {
      out += " ";
    }
    out += t.text;
  }
  return out;
}

std::string printStatement(const Statement& s) {
  switch (s.kind) {
    case StatementKind::kScopeOpen:
      return "{";
    case StatementKind::kScopeClose:
      return "}";
    case StatementKind::kLabel:
      return s.opcode + ":";
    case StatementKind::kDirective:
      return joinTokens(s.tokens) + ";";
    case StatementKind::kLineDirective:
      return joinTokens(s.tokens);
    case StatementKind::kInstruction:
      break;
  }
  std::string out;
  if (!s.guard.empty()) out += (s.guardNegated ? "@!" : "@") + s.guard + " ";
  out += s.opcode;
  for (size_t i = 0; i < s.operands.size(); ++i) {
    out += i == 0 ? " " : ", ";
    out += joinTokens(s.operands[i].tokens);
  }
  out += ";";
  return out;
}

std::string printModule(const Module& module) {
  std::string out;
  for (const Item& item : module.items) {
    switch (item.kind) {
      case ItemKind::kLineDirective:
        out += joinTokens(item.tokens) + "\n";
        break;
      case ItemKind::kDeclaration:
        out += joinTokens(item.tokens) + ";\n";
        break;
      case ItemKind::kRaw:
        out += joinTokens(item.tokens, true) + "\n";
        break;
      case ItemKind::kFunction:
        printFunction(out, item.function);
        break;
    }
  }
  return out;
}

}  // namespace tally::server::transform
