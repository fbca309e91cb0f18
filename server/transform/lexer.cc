#include "server/transform/lexer.h"

#include <cstdio>

namespace tally::server::transform {
namespace {

bool isWordStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c == '%';
}
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isWordChar(char c) { return isWordStart(c) || isDigit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  LexResult run() {
    LexResult result;
    while (skipSpaceAndComments()) {
      if (!error_.empty()) break;
      if (!lexToken()) break;
    }
    if (!error_.empty()) {
      result.error = error_;
      return result;
    }
    result.ok = true;
    result.tokens = std::move(tokens_);
    return result;
  }

 private:
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  void fail(const std::string& what) { error_ = "line " + std::to_string(line_) + ": " + what; }

  // Returns false at the end of input (or on error).
  bool skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '\n') {
        ++line_;
        sawLine_ = sawSpace_ = true;
        ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
        sawSpace_ = true;
        ++pos_;
      } else if (c == '/' && peek(1) == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
        sawSpace_ = true;
      } else if (c == '/' && peek(1) == '*') {
        size_t end = text_.find("*/", pos_ + 2);
        if (end == std::string_view::npos) {
          fail("unterminated block comment");
          return false;
        }
        for (size_t i = pos_; i < end; ++i) line_ += text_[i] == '\n';
        pos_ = end + 2;
        sawSpace_ = true;
      } else {
        return true;
      }
    }
    return false;
  }

  // Words may hold dots (mov.u32, %ctaid.x) and "::" (ld.shared::cluster.u32), but a lone ':'
  // ends them because it ends a label.
  size_t wordEnd(size_t from) const {
    size_t i = from;
    while (i < text_.size()) {
      char c = text_[i];
      if (isWordChar(c) || c == '.') {
        ++i;
      } else if (c == ':' && i + 1 < text_.size() && text_[i + 1] == ':') {
        i += 2;
      } else {
        break;
      }
    }
    return i;
  }

  bool lexToken() {
    char c = text_[pos_];
    size_t start = pos_;
    TokenKind kind;
    if (isWordStart(c)) {
      kind = TokenKind::kWord;
      pos_ = wordEnd(pos_ + 1);
    } else if (c == '.' && isWordStart(peek(1)) && peek(1) != '%') {
      kind = TokenKind::kDirective;
      pos_ = wordEnd(pos_ + 1);
    } else if (isDigit(c)) {
      kind = TokenKind::kNumber;
      ++pos_;
      while (pos_ < text_.size() && (isWordChar(text_[pos_]) || text_[pos_] == '.')) ++pos_;
    } else if (c == '"') {
      kind = TokenKind::kString;
      if (!skipString()) return false;
    } else if (std::string_view("{}()[],;:<>+-!@=|*/~&^?").find(c) != std::string_view::npos) {
      kind = TokenKind::kPunct;
      ++pos_;
    } else {
      char buf[8];
      snprintf(buf, sizeof buf, "0x%02x", static_cast<unsigned char>(c));
      fail(std::string("unexpected character ") + buf);
      return false;
    }
    Token token;
    token.kind = kind;
    token.text = std::string(text_.substr(start, pos_ - start));
    token.line = line_;
    token.spaceBefore = sawSpace_;
    token.lineBefore = sawLine_;
    sawSpace_ = sawLine_ = false;
    tokens_.push_back(std::move(token));
    return true;
  }

  bool skipString() {
    ++pos_;
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] != '\n') {
        pos_ += 2;
      } else if (c == '"') {
        ++pos_;
        return true;
      } else if (c == '\n') {
        break;
      } else {
        ++pos_;
      }
    }
    fail("unterminated string");
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  bool sawSpace_ = false;
  bool sawLine_ = false;
  std::string error_;
  Tokens tokens_;
};

}  // namespace

LexResult lex(std::string_view text) { return Lexer(text).run(); }

}  // namespace tally::server::transform
