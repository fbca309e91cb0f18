// Tokenizer for PTX text (the first pass of the front end).
#pragma once

#include <string>
#include <string_view>

#include "server/transform/ptx.h"

namespace tally::server::transform {

struct LexResult {
  bool ok = false;
  Tokens tokens;
  std::string error;  // "line N: ..." when !ok
};

// Splits PTX into tokens, dropping comments and whitespace (recorded as Token::spaceBefore /
// lineBefore). Never throws; rejects bytes PTX cannot contain (NUL, non-ASCII outside strings
// and comments), unterminated strings and block comments.
LexResult lex(std::string_view text);

}  // namespace tally::server::transform
