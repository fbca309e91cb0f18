// Parser for PTX modules (the second pass of the front end): tokens -> Module.
#pragma once

#include <string>
#include <string_view>

#include "server/transform/ptx.h"

namespace tally::server::transform {

struct ParseResult {
  bool ok = false;
  Module module;
  std::string error;  // "line N: ..." when !ok
};

// Parses a whole module. Fails (never throws, never crashes) on text that does not lex or whose
// module-level structure is broken: unbalanced braces or parentheses, a function without a
// name, a declaration missing its ';'. A function body whose statements do not parse does not
// fail the module: the function keeps its raw tokens and Function::bodyError says why.
ParseResult parseModule(std::string_view text);

struct StatementsResult {
  bool ok = false;
  std::vector<Statement> statements;
  std::string error;
};

// Parses a sequence of body statements (what lies between a function's braces). Passes use it
// to build the code they insert from readable PTX text.
StatementsResult parseStatements(std::string_view text);

// Parses already-lexed body tokens [begin, end).
StatementsResult parseStatementTokens(const Tokens& tokens, size_t begin, size_t end);

}  // namespace tally::server::transform
