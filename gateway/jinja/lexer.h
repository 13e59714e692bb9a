// Template source to tokens, following jinja2's lexer with the settings transformers uses:
// trim_blocks (a block or comment tag eats the one newline after it), lstrip_blocks (spaces
// and tabs before a block or comment tag on its own line go), `-`/`+` whitespace control,
// {% raw %}, newlines normalised to \n and one trailing newline dropped.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::jinja {

struct Token {
  enum class Type : uint8_t {
    kData,           // template text, already whitespace-controlled
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,  // text: the unescaped value
    kInteger,
    kFloat,
    kOperator,  // text: the operator's spelling
    kEof,
  };
  Type type;
  int line;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
};

// Throws TemplateError (kSyntax) naming the line of the first lexical error.
std::vector<Token> tokenize(std::string_view source);

}  // namespace hearth::jinja
