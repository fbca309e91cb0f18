// Unit tests of the PTX lexer, parser and printer on hand-written snippets.
#include <gtest/gtest.h>

#include "server/transform/lexer.h"
#include "server/transform/parser.h"
#include "server/transform/printer.h"
#include "test_util.h"

namespace tally::server::transform {
namespace {

constexpr const char* kHeader = ".version 8.0\n.target sm_80\n.address_size 64\n";

Module parseOk(const std::string& text) {
  ParseResult r = parseModule(text);
  EXPECT_TRUE(r.ok) << r.error;
  return r.module;
}

const Function& onlyFunction(const Module& m) {
  for (const Item& item : m.items) {
    if (item.kind == ItemKind::kFunction) return item.function;
  }
  throw std::runtime_error("no function");
}

TEST(Lexer, SplitsWordsDirectivesNumbersAndPunctuation) {
  LexResult r = lex("@!%p1 bra $L__BB0_2; // comment\nld.param.u32 %r1, [k_param_0+8]; mov.f32 %f1, 0f3F800000;");
  ASSERT_TRUE(r.ok) << r.error;
  std::vector<std::string> texts;
  for (const Token& t : r.tokens) texts.push_back(t.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"@", "!", "%p1", "bra", "$L__BB0_2", ";", "ld.param.u32", "%r1", ",", "[",
                                             "k_param_0", "+", "8", "]", ";", "mov.f32", "%f1", ",", "0f3F800000", ";"}));
  EXPECT_TRUE(r.tokens[6].lineBefore);
  EXPECT_EQ(r.tokens[6].line, 2u);
}

TEST(Lexer, KeepsSpecialRegistersAndClusterStateSpacesWhole) {
  LexResult r = lex("mov.u32 %r1, %ctaid.x; ld.shared::cluster.u32 %r2, [%r3]; .shared::cta");
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.tokens[3].text, "%ctaid.x");
  EXPECT_EQ(r.tokens[5].text, "ld.shared::cluster.u32");
  EXPECT_EQ(r.tokens.back().text, ".shared::cta");
  EXPECT_EQ(r.tokens.back().kind, TokenKind::kDirective);
}

TEST(Lexer, LabelColonIsSeparate) {
  LexResult r = lex("$L__BB0_3:");
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(r.tokens[0].text, "$L__BB0_3");
}

TEST(Lexer, RejectsBadInput) {
  EXPECT_FALSE(lex("mov.u32 %r1, \"unterminated").ok);
  EXPECT_FALSE(lex("/* never closed").ok);
  EXPECT_FALSE(lex(std::string("mov\0x", 5)).ok);
  LexResult r = lex("ok;\n\x80");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("line 2"), std::string::npos) << r.error;
  EXPECT_TRUE(lex("// caf\xc3\xa9 in a comment is fine\n").ok);
}

TEST(Parser, ModuleDirectivesDeclarationsAndFunctions) {
  Module m = parseOk(std::string(kHeader) +
                     ".extern .shared .align 16 .b8 dyn[];\n"
                     ".global .align 4 .b8 table[8] = {1, 2, 3, 4, 5, 6, 7, 8};\n"
                     ".const .align 4 .u32 k = 5;\n"
                     ".extern .func (.param .b32 func_retval0) vprintf\n(\n.param .b64 a,\n.param .b64 b\n)\n;\n"
                     ".visible .entry k(\n.param .u64 .ptr .align 1 k_param_0,\n.param .align 4 .b8 k_param_1[12]\n)\n"
                     ".maxntid 256, 1, 1\n.minnctapersm 2\n{\nret;\n}\n");
  ASSERT_EQ(m.items.size(), 8u);
  EXPECT_EQ(m.items[0].kind, ItemKind::kLineDirective);
  EXPECT_EQ(m.items[3].kind, ItemKind::kDeclaration);
  const Function& vprintf = m.items[6].function;
  EXPECT_FALSE(vprintf.isEntry);
  EXPECT_FALSE(vprintf.hasBody);
  EXPECT_TRUE(vprintf.hasReturns);
  EXPECT_EQ(vprintf.returns.at(0).name, "func_retval0");
  const Function& k = m.items[7].function;
  EXPECT_TRUE(k.isEntry);
  ASSERT_EQ(k.params.size(), 2u);
  EXPECT_EQ(k.params[0].name, "k_param_0");
  EXPECT_EQ(k.params[1].name, "k_param_1");
  EXPECT_EQ(joinTokens(k.attributes), ".maxntid 256, 1, 1 .minnctapersm 2");
}

TEST(Parser, InstructionsLabelsGuardsAndOperands) {
  Module m = parseOk(std::string(kHeader) +
                     ".visible .entry k()\n{\n.reg .pred %p<3>;\n.reg .b32 %r<9>;\n"
                     "@%p1 bra $L__BB0_2;\n@!%p2 bra.uni $L__BB0_2;\n"
                     "mov.b64 %rd1, {%r1, %r2};\nst.global.v2.u32 [%rd1+8], {%r3, %r4};\n"
                     "setp.lt.s32 %p1|%p2, %r1, -1;\n"
                     "$L__BB0_2:\n{ .reg .b64 %tmp; cvt.u64.u32 %tmp, %r3; }\nbar.sync 1, 64;\nret;\n}\n");
  const Function& k = onlyFunction(m);
  ASSERT_TRUE(k.bodyError.empty()) << k.bodyError;
  ASSERT_EQ(k.body.size(), 14u);
  EXPECT_EQ(k.body[2].guard, "%p1");
  EXPECT_FALSE(k.body[2].guardNegated);
  EXPECT_TRUE(k.body[3].guardNegated);
  EXPECT_EQ(k.body[3].opcode, "bra.uni");
  EXPECT_EQ(joinTokens(k.body[4].operands[1].tokens), "{%r1, %r2}");
  EXPECT_EQ(joinTokens(k.body[5].operands[0].tokens), "[%rd1+8]");
  EXPECT_EQ(joinTokens(k.body[6].operands[0].tokens), "%p1|%p2");
  EXPECT_EQ(k.body[7].kind, StatementKind::kLabel);
  EXPECT_EQ(k.body[8].kind, StatementKind::kScopeOpen);
  EXPECT_EQ(printStatement(k.body[6]), "setp.lt.s32 %p1|%p2, %r1, -1;");
}

TEST(Parser, CallWithReturnAndParameterLists) {
  Module m = parseOk(std::string(kHeader) +
                     ".extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);\n"
                     ".visible .entry k()\n{\n.reg .b32 %r<2>;\n{ // callseq 0, 0\n.param .b64 param0;\n"
                     ".param .b64 param1;\n.param .b32 retval0;\n"
                     "call.uni (retval0), \nvprintf, \n(\nparam0, \nparam1\n);\n"
                     "ld.param.b32 %r1, [retval0+0];\n} // callseq 0\nret;\n}\n");
  const Function& k = m.items.back().function;
  ASSERT_TRUE(k.bodyError.empty()) << k.bodyError;
  const Statement& call = k.body[5];
  EXPECT_EQ(call.opcode, "call.uni");
  ASSERT_EQ(call.operands.size(), 3u);
  EXPECT_EQ(printStatement(call), "call.uni (retval0), vprintf, (param0, param1);");
}

TEST(Parser, LineDirectivesEndAtTheLineEnd) {
  Module m = parseOk(std::string(kHeader) + ".file 1 \"/tmp/a.cu\"\n.visible .entry k()\n{\n.loc 1 5 3\nret;\n}\n");
  const Function& k = onlyFunction(m);
  ASSERT_EQ(k.body.size(), 2u);
  EXPECT_EQ(k.body[0].kind, StatementKind::kLineDirective);
  EXPECT_EQ(printStatement(k.body[0]), ".loc 1 5 3");
}

TEST(Parser, PragmaAttributeAndNoreturn) {
  Module m = parseOk(std::string(kHeader) + ".func f() .noreturn\n{\ntrap;\n}\n.visible .entry k() .pragma \"nounroll\";\n{\nret;\n}\n");
  EXPECT_EQ(joinTokens(m.items[3].function.attributes), ".noreturn");
  EXPECT_EQ(joinTokens(m.items[4].function.attributes), ".pragma \"nounroll\";");
}

TEST(Parser, BrokenBodyIsKeptRawAndReported) {
  Module m = parseOk(std::string(kHeader) + ".visible .entry k()\n{\nmov.u32 %r1, %r2\nret;\n}\n");
  const Function& k = onlyFunction(m);
  EXPECT_FALSE(k.bodyError.empty());
  EXPECT_FALSE(k.rawBody.empty());
  EXPECT_NE(printModule(m).find("mov.u32 %r1, %r2\nret;"), std::string::npos) << printModule(m);
}

TEST(Parser, MalformedModulesFailWithALine) {
  const char* cases[] = {
      ".visible .entry k(\n{\nret;\n}\n",     // unclosed parameter list
      ".visible .entry k()\n{\nret;\n",       // unclosed body
      ".visible .entry k()\n{\nret;\n}\n}\n", // stray brace
      ".visible .entry ()\n{\n}\n",           // no name
      ".global .u32 x\n.global .u32 y;\n",    // missing ';' (line directive inside)
      ".global .b8 t[4] = {1, 2, 3, 4;\n",    // unclosed initializer
      ".visible .entry k() ]\n{\n}\n",        // garbage attribute
      ".visible .entry k()",                  // truncated
      ".global .u32 x",                       // truncated declaration
  };
  for (const char* c : cases) {
    ParseResult r = parseModule(std::string(kHeader) + c);
    EXPECT_FALSE(r.ok) << c;
    EXPECT_EQ(r.error.rfind("line ", 0), 0u) << r.error;
  }
}

TEST(Printer, RoundTripKeepsTokens) {
  std::string text = std::string(kHeader) +
                     ".global .align 4 .b8 table[4] = {1, 2, 3, 4};\n"
                     ".visible .entry k(.param .u64 k_param_0)\n.reqntid 128, 1, 1\n{\n.reg .b32 %r<4>;\n"
                     "mov.u32 %r1, %ctaid.x;\n@%p1 bra $L__BB0_1;\n$L__BB0_1:\nret;\n}\n";
  std::string printed = printModule(parseOk(text));
  EXPECT_EQ(test::tokenTexts(printed), test::tokenTexts(text)) << printed;
  EXPECT_EQ(printModule(parseOk(printed)), printed);
}

TEST(Parser, StatementsFromText) {
  StatementsResult r = parseStatements("add.s32 %r1, %r2, 1;\nlabel:\n@%p bra label;");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.statements.size(), 3u);
  EXPECT_FALSE(parseStatements("add.s32 %r1, , 1;").ok);
  EXPECT_FALSE(parseStatements("add.s32 %r1, %r2").ok);
  EXPECT_FALSE(parseStatements("@ ;").ok);
}

}  // namespace
}  // namespace tally::server::transform
