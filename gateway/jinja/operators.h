// Jinja's operators with Python's semantics: arithmetic on 64-bit ints (overflow is an error,
// Python would grow the integer) and floats, + and * on strings and lists, ~, comparisons and
// `in`. Results that are strings or lists are bounded by max_bytes / max_items.
#pragma once

#include <cstddef>
#include <vector>

#include "gateway/jinja/ast.h"
#include "gateway/jinja/value.h"

namespace hearth::jinja {

Value binary(BinaryOp op, const Value& a, const Value& b, size_t max_bytes);
Value negate(const Value& a);
Value positive(const Value& a);
// a ~ b ~ ...: str() of each, undefined as "".
Value concat(const std::vector<Value>& parts, size_t max_bytes);
bool compare(CompareOp op, const Value& a, const Value& b);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);

}  // namespace hearth::jinja
