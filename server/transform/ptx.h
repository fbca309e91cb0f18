// The PTX syntax tree shared by every pass of the kernel transformer.
//
// The tree is deliberately shallow: statements keep their tokens, so that the printer can give
// back what nvcc wrote (token for token) and passes only need to understand the parts they
// change (operands, parameter lists, labels). See docs/transform.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tally::server::transform {

enum class TokenKind {
  kWord,       // opcode (mov.u32), register (%r1, %ctaid.x), label ($L__BB0_2), symbol name
  kDirective,  // .reg, .u32, .align, .shared::cluster ...
  kNumber,     // 42, 0x1F, 0f3F800000, 9.0
  kString,     // "nounroll" (quotes included)
  kPunct,      // one of { } ( ) [ ] , ; : < > + - ! @ = | and friends
};

struct Token {
  TokenKind kind = TokenKind::kPunct;
  std::string text;
  uint32_t line = 0;         // 1-based source line, for error messages
  bool spaceBefore = false;  // whitespace separated it from the previous token
  bool lineBefore = false;   // a line break separated it from the previous token
};
using Tokens = std::vector<Token>;

// One operand of an instruction: the tokens between two top-level commas, e.g. `%r1`,
// `[%rd1+8]`, `{%r1, %r2}`, `(param0, param1)` or `%p1|%p2`.
struct Operand {
  Tokens tokens;
};

enum class StatementKind {
  kInstruction,    // [@[!]guard] opcode operands ;
  kLabel,          // name :
  kDirective,      // .reg .b32 %r<4>;  .local ...;  .pragma "x";  .branchtargets ...;
  kLineDirective,  // .loc / .file: no ';', ends at the end of the line
  kScopeOpen,      // {
  kScopeClose,     // }
};

struct Statement {
  StatementKind kind = StatementKind::kInstruction;
  uint32_t line = 0;
  // kInstruction
  std::string guard;  // predicate register of `@%p` / `@!%p`, empty when unguarded
  bool guardNegated = false;
  std::string opcode;  // with its modifiers, e.g. "ld.param.u32"; kLabel: the label name
  std::vector<Operand> operands;
  // kDirective / kLineDirective: every token, without the ';'
  Tokens tokens;
};

struct Param {
  Tokens tokens;     // `.param .u64 .ptr .align 1 name`, `.param .align 4 .b8 name[12]`, `.reg .b32 x`
  std::string name;  // the declared name; empty if none could be found
};

struct Function {
  uint32_t line = 0;
  Tokens linkage;  // .visible / .extern / .weak before .entry/.func
  bool isEntry = false;
  bool hasReturns = false;
  std::vector<Param> returns;  // .func (.param .b32 func_retval0) name
  std::string name;
  bool hasParamList = false;
  std::vector<Param> params;
  Tokens attributes;  // .maxntid 256, 1, 1  .reqnctapercluster ...  .noreturn  .pragma "x";
  bool hasBody = false;  // false for prototypes ending in ';'
  std::vector<Statement> body;
  // A body the statement parser could not make sense of is kept as raw tokens and printed
  // back as it was; bodyError says why (eligibility reports it).
  std::string bodyError;
  Tokens rawBody;
};

enum class ItemKind {
  kLineDirective,  // .version / .target / .address_size / .file
  kDeclaration,    // .global / .const / .shared / .extern ... ; (printed with ';')
  kRaw,            // .section ... { ... } and anything else kept as tokens
  kFunction,
};

struct Item {
  ItemKind kind = ItemKind::kDeclaration;
  Tokens tokens;
  Function function;  // kFunction
};

struct Module {
  std::vector<Item> items;
};

}  // namespace tally::server::transform
