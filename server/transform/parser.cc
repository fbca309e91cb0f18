#include "server/transform/parser.h"

#include <algorithm>
#include <stdexcept>

#include "server/transform/lexer.h"

namespace tally::server::transform {
namespace {

// Thrown inside this file only; the public functions turn it into an error result.
struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool is(const Token& t, std::string_view text) { return t.text == text && t.kind != TokenKind::kString; }

// Directives that take no ';' and end at the end of their line.
bool isLineDirective(const Token& t) {
  return t.kind == TokenKind::kDirective &&
         (t.text == ".version" || t.text == ".target" || t.text == ".address_size" ||
          t.text == ".file" || t.text == ".loc");
}

class TokenCursor {
 public:
  TokenCursor(const Tokens& tokens, size_t begin, size_t end) : tokens_(tokens), pos_(begin), end_(end) {}

  bool atEnd() const { return pos_ >= end_; }
  size_t pos() const { return pos_; }
  const Token& peek(size_t ahead = 0) const {
    if (pos_ + ahead >= end_) fail("unexpected end of input");
    return tokens_[pos_ + ahead];
  }
  bool peekIs(std::string_view text, size_t ahead = 0) const {
    return pos_ + ahead < end_ && is(tokens_[pos_ + ahead], text);
  }
  const Token& next() {
    const Token& t = peek();
    ++pos_;
    return t;
  }
  void expect(std::string_view text) {
    if (!peekIs(text)) fail("expected '" + std::string(text) + "'" + found());
    ++pos_;
  }
  [[noreturn]] void fail(const std::string& what) const {
    uint32_t line = tokens_.empty() ? 0 : tokens_[std::min(pos_, tokens_.size() - 1)].line;
    if (pos_ >= end_ && end_ > 0 && end_ <= tokens_.size()) line = tokens_[end_ - 1].line;
    throw ParseError("line " + std::to_string(line) + ": " + what);
  }
  std::string found() const { return pos_ < end_ ? ", found '" + tokens_[pos_].text + "'" : " before the end"; }

  // Index one past the token that closes the bracket opened at `open` (which must be one of
  // { ( [ ); brackets of every kind must nest properly.
  size_t matching(size_t open) const {
    std::string stack;
    for (size_t i = open; i < end_; ++i) {
      const Token& t = tokens_[i];
      if (t.kind != TokenKind::kPunct) continue;
      char c = t.text[0];
      if (c == '{' || c == '(' || c == '[') {
        stack.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
      } else if (c == '}' || c == ')' || c == ']') {
        if (stack.empty() || stack.back() != c) {
          throw ParseError("line " + std::to_string(t.line) + ": unbalanced '" + t.text + "'");
        }
        stack.pop_back();
        if (stack.empty()) return i + 1;
      }
    }
    throw ParseError("line " + std::to_string(tokens_[open].line) + ": '" + tokens_[open].text +
                     "' is never closed");
  }

  const Tokens& tokens() const { return tokens_; }
  void seek(size_t pos) { pos_ = pos; }
  size_t end() const { return end_; }

 private:
  const Tokens& tokens_;
  size_t pos_;
  size_t end_;
};

// ---- statements (function bodies) -------------------------------------------------------------

class StatementParser {
 public:
  explicit StatementParser(TokenCursor& cursor) : in_(cursor) {}

  std::vector<Statement> run() {
    std::vector<Statement> out;
    int depth = 0;
    while (!in_.atEnd()) {
      out.push_back(statement());
      if (out.back().kind == StatementKind::kScopeOpen) ++depth;
      if (out.back().kind == StatementKind::kScopeClose && --depth < 0) in_.fail("unbalanced '}'");
    }
    if (depth != 0) in_.fail("unclosed '{' in function body");
    return out;
  }

 private:
  Statement statement() {
    Statement s;
    const Token& first = in_.peek();
    s.line = first.line;
    if (is(first, "{") || is(first, "}")) {
      s.kind = is(first, "{") ? StatementKind::kScopeOpen : StatementKind::kScopeClose;
      in_.next();
    } else if (isLineDirective(first)) {
      s.kind = StatementKind::kLineDirective;
      s.tokens = restOfLine();
    } else if (first.kind == TokenKind::kDirective) {
      s.kind = StatementKind::kDirective;
      s.tokens = untilSemicolon();
    } else if (first.kind == TokenKind::kWord && in_.peekIs(":", 1)) {
      s.kind = StatementKind::kLabel;
      s.opcode = in_.next().text;
      in_.next();
    } else {
      instruction(s);
    }
    return s;
  }

  Tokens restOfLine() {
    Tokens out{in_.next()};
    while (!in_.atEnd() && !in_.peek().lineBefore) out.push_back(in_.next());
    return out;
  }

  Tokens untilSemicolon() {
    Tokens out;
    while (!in_.peekIs(";")) {
      const Token& t = in_.peek();
      if (is(t, "{") || is(t, "}")) in_.fail("expected ';' before '" + t.text + "'");
      out.push_back(in_.next());
    }
    in_.next();
    return out;
  }

  void instruction(Statement& s) {
    s.kind = StatementKind::kInstruction;
    if (in_.peekIs("@")) {
      in_.next();
      if (in_.peekIs("!")) {
        in_.next();
        s.guardNegated = true;
      }
      const Token& guard = in_.next();
      if (guard.kind != TokenKind::kWord) in_.fail("expected a predicate after '@', found '" + guard.text + "'");
      s.guard = guard.text;
    }
    const Token& op = in_.next();
    if (op.kind != TokenKind::kWord) in_.fail("expected an instruction, found '" + op.text + "'");
    s.opcode = op.text;
    if (in_.peekIs(";")) {
      in_.next();
      return;
    }
    while (true) {
      s.operands.push_back(operand());
      if (in_.peekIs(";")) {
        in_.next();
        return;
      }
      in_.expect(",");
    }
  }

  // Tokens up to the next top-level ',' or ';'; brackets group (vectors, addresses, call lists).
  Operand operand() {
    Operand out;
    while (!in_.peekIs(",") && !in_.peekIs(";")) {
      const Token& t = in_.peek();
      if (is(t, "{") || is(t, "(") || is(t, "[")) {
        size_t close = in_.matching(in_.pos());
        for (size_t i = in_.pos(); i < close; ++i) out.tokens.push_back(in_.tokens()[i]);
        in_.seek(close);
      } else if (is(t, "}") || is(t, ")") || is(t, "]")) {
        in_.fail("unbalanced '" + t.text + "'");
      } else if (t.kind == TokenKind::kDirective || (t.kind == TokenKind::kWord && t.lineBefore && !out.tokens.empty())) {
        // A directive (or a new line starting with a word) inside an operand means the ';'
        // of this instruction is missing.
        in_.fail("expected ';' before '" + t.text + "'");
      } else {
        // Two names or numbers in a row (`%r1 %r2`) mean a missing ','.
        bool value = t.kind == TokenKind::kWord || t.kind == TokenKind::kNumber;
        const Token* last = out.tokens.empty() ? nullptr : &out.tokens.back();
        if (value && last != nullptr && (last->kind == TokenKind::kWord || last->kind == TokenKind::kNumber)) {
          in_.fail("expected ',' before '" + t.text + "'");
        }
        out.tokens.push_back(in_.next());
      }
    }
    if (out.tokens.empty()) in_.fail("empty operand" + in_.found());
    return out;
  }

  TokenCursor& in_;
};

// ---- module level -------------------------------------------------------------------------------

bool isLinkage(const Token& t) {
  return t.kind == TokenKind::kDirective &&
         (t.text == ".visible" || t.text == ".extern" || t.text == ".weak" || t.text == ".common");
}

class ModuleParser {
 public:
  explicit ModuleParser(const Tokens& tokens) : in_(tokens, 0, tokens.size()) {}

  Module run() {
    Module module;
    while (!in_.atEnd()) module.items.push_back(item());
    return module;
  }

 private:
  Item item() {
    Item it;
    const Token& first = in_.peek();
    if (isLineDirective(first)) {
      it.kind = ItemKind::kLineDirective;
      it.tokens.push_back(in_.next());
      while (!in_.atEnd() && !in_.peek().lineBefore) it.tokens.push_back(in_.next());
      return it;
    }
    if (is(first, ".section")) {  // DWARF sections of -G output: kept verbatim
      it.kind = ItemKind::kRaw;
      while (!in_.peekIs("{")) it.tokens.push_back(in_.next());
      size_t close = in_.matching(in_.pos());
      for (size_t i = in_.pos(); i < close; ++i) it.tokens.push_back(in_.tokens()[i]);
      in_.seek(close);
      return it;
    }
    if (isFunctionAhead()) {
      it.kind = ItemKind::kFunction;
      it.function = function();
      return it;
    }
    it.kind = ItemKind::kDeclaration;
    while (!in_.peekIs(";")) {
      const Token& t = in_.peek();
      if (is(t, "{") || is(t, "[") || is(t, "(")) {  // initializer list, array size
        size_t close = in_.matching(in_.pos());
        for (size_t i = in_.pos(); i < close; ++i) it.tokens.push_back(in_.tokens()[i]);
        in_.seek(close);
        continue;
      }
      if (is(t, "}") || is(t, ")") || is(t, "]")) in_.fail("unbalanced '" + t.text + "'");
      // A directive on a new line after the declared name starts the next statement.
      bool sawName = std::any_of(it.tokens.begin(), it.tokens.end(), [](const Token& x) { return x.kind == TokenKind::kWord; });
      if ((isLineDirective(t) || (t.lineBefore && t.kind == TokenKind::kDirective && sawName)) && !it.tokens.empty()) {
        in_.fail("expected ';' before '" + t.text + "'");
      }
      it.tokens.push_back(in_.next());
    }
    in_.next();
    if (it.tokens.empty()) in_.fail("empty declaration");
    return it;
  }

  bool isFunctionAhead() const {
    for (size_t i = 0; !in_.atEnd() && in_.pos() + i < in_.end(); ++i) {
      const Token& t = in_.peek(i);
      if (is(t, ".entry") || is(t, ".func")) return true;
      if (!isLinkage(t)) return false;
    }
    return false;
  }

  Function function() {
    Function f;
    f.line = in_.peek().line;
    while (isLinkage(in_.peek())) f.linkage.push_back(in_.next());
    f.isEntry = is(in_.next(), ".entry");
    if (!f.isEntry && in_.peekIs("(")) {
      f.hasReturns = true;
      f.returns = paramList();
    }
    const Token& name = in_.next();
    if (name.kind != TokenKind::kWord) in_.fail("expected a function name, found '" + name.text + "'");
    f.name = name.text;
    if (in_.peekIs("(")) {
      f.hasParamList = true;
      f.params = paramList();
    }
    attributes(f);
    if (in_.peekIs(";")) {
      in_.next();
      return f;
    }
    in_.expect("{");
    f.hasBody = true;
    size_t close = in_.matching(in_.pos() - 1);
    body(f, in_.pos(), close - 1);
    in_.seek(close);
    return f;
  }

  std::vector<Param> paramList() {
    size_t close = in_.matching(in_.pos());
    in_.expect("(");
    std::vector<Param> params;
    while (in_.pos() < close - 1) {
      Param p;
      while (!in_.peekIs(",") && in_.pos() < close - 1) {
        if (in_.peekIs("(") || in_.peekIs("{")) in_.fail("unexpected '" + in_.peek().text + "' in a parameter list");
        p.tokens.push_back(in_.next());
      }
      if (p.tokens.empty()) in_.fail("empty parameter");
      p.name = paramName(p.tokens);
      params.push_back(std::move(p));
      if (in_.peekIs(",")) in_.next();
    }
    in_.expect(")");
    return params;
  }

  // The declared name: the last word before an optional [N] array suffix.
  static std::string paramName(const Tokens& tokens) {
    for (auto it = tokens.rbegin(); it != tokens.rend(); ++it) {
      if (it->kind == TokenKind::kWord) return it->text;
    }
    return {};
  }

  // Performance directives between the parameter list and the body: .maxntid 256, 1, 1 ...
  void attributes(Function& f) {
    while (!in_.peekIs("{") && !in_.peekIs(";")) {
      const Token& t = in_.peek();
      if (is(t, ".pragma")) {
        while (!in_.peekIs(";")) f.attributes.push_back(in_.next());
        f.attributes.push_back(in_.next());
        continue;
      }
      if (t.kind == TokenKind::kPunct && !is(t, ",")) in_.fail("unexpected '" + t.text + "' after the parameters of " + f.name);
      f.attributes.push_back(in_.next());
    }
  }

  // A body that does not parse is kept raw: the module still prints, the kernel is reported.
  void body(Function& f, size_t begin, size_t end) {
    try {
      TokenCursor cursor(in_.tokens(), begin, end);
      f.body = StatementParser(cursor).run();
    } catch (const ParseError& e) {
      f.body.clear();
      f.bodyError = e.what();
      f.rawBody.assign(in_.tokens().begin() + static_cast<long>(begin), in_.tokens().begin() + static_cast<long>(end));
    }
  }

  TokenCursor in_;
};

}  // namespace

ParseResult parseModule(std::string_view text) {
  ParseResult result;
  LexResult lexed = lex(text);
  if (!lexed.ok) {
    result.error = lexed.error;
    return result;
  }
  try {
    result.module = ModuleParser(lexed.tokens).run();
    result.ok = true;
  } catch (const ParseError& e) {
    result.error = e.what();
  }
  return result;
}

StatementsResult parseStatementTokens(const Tokens& tokens, size_t begin, size_t end) {
  StatementsResult result;
  try {
    TokenCursor cursor(tokens, begin, end);
    result.statements = StatementParser(cursor).run();
    result.ok = true;
  } catch (const ParseError& e) {
    result.error = e.what();
  }
  return result;
}

StatementsResult parseStatements(std::string_view text) {
  LexResult lexed = lex(text);
  if (!lexed.ok) {
    StatementsResult result;
    result.error = lexed.error;
    return result;
  }
  return parseStatementTokens(lexed.tokens, 0, lexed.tokens.size());
}

}  // namespace tally::server::transform
