// Printer (the last pass): Module -> PTX text that ptxas accepts.
#pragma once

#include <string>

#include "server/transform/ptx.h"

namespace tally::server::transform {

// Prints the module. Parsing nvcc's PTX and printing it gives back the same tokens in the same
// order (comments and layout aside), which tests/transform checks for the whole corpus.
std::string printModule(const Module& module);

// One statement, without indentation or newline ("mov.u32 %r1, %ctaid.x;", "$L__BB0_2:").
std::string printStatement(const Statement& statement);

// Tokens joined as they were written: a space where the source had whitespace. With
// keepLines, a line break where the source had one (for .section contents and attributes).
std::string joinTokens(const Tokens& tokens, bool keepLines = false);

}  // namespace tally::server::transform
