// Tokens to a Program, with jinja2's grammar and precedence. Everything the subset does not
// implement is refused here, naming the construct and its line: unknown tags (include,
// extends, call, filter, ...), filters, tests, methods and functions, *args / **kwargs, and
// nesting deeper than the limit (so a hostile template cannot exhaust the stack).
#pragma once

#include <string_view>

#include "gateway/jinja/ast.h"

namespace hearth::jinja {

struct ParseLimits {
  size_t max_source_bytes = 1 << 20;
  int max_nesting = 64;            // nested blocks, and nested brackets / parentheses
  int max_expression_depth = 256;  // the parsed expression tree (a + b + c + ... included)
};

// Throws TemplateError (kSyntax or kUnsupported).
Program parse_template(std::string_view source, const ParseLimits& limits = {});

}  // namespace hearth::jinja
