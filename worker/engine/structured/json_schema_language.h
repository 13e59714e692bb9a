// JSON Schema (the subset vLLM documents) to a regular language of JSON texts.
//
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them),
// properties, required, additionalProperties (false, true or absent: only the listed
// properties are generated either way), enum, const, items, minItems, maxItems, minLength,
// maxLength, minimum, maximum, exclusiveMinimum and exclusiveMaximum (integer bounds), anyOf,
// and the annotations title, description, $schema, $comment, examples, default. Every other
// keyword is refused by name (SchemaError), never ignored.
//
// What is generated: properties in schema order, every required one present, optional ones
// present or not; no whitespace inside or around values beyond kMaxWhitespace bytes between
// tokens; strings of any UTF-8 character with JSON's escapes (\uXXXX outside the surrogates);
// numbers without an exponent when bounded. A schema without a type, or an object without
// properties, is any JSON value (object) nested at most kMaxAnyJsonDepth deep.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "worker/engine/structured/byte_language.h"

namespace hearth::structured {

// Containers an unconstrained JSON value may nest: each level doubles the automaton (it
// remembers which containers are open), so both are bounded. json_object is one grammar of
// its own (depth 8: 17.7k states, ~0.35 s to compile once per engine); an untyped value inside
// a schema ({} or an object without properties) gets less, so that a few of them side by side
// stay within kMaxGrammarStates (depth 4: ~1k states each).
inline constexpr int kMaxJsonObjectDepth = 8;
inline constexpr int kMaxAnyJsonDepth = 4;
// Whitespace bytes allowed between two JSON tokens (a model loops on whitespace otherwise).
inline constexpr int kMaxWhitespace = 2;

class SchemaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The language of the JSON texts valid under `schema_json` (JSON text of a schema). Throws
// SchemaError naming the keyword and its JSON path for anything unsupported or malformed.
LangPtr json_schema_language(std::string_view schema_json);

// Any JSON object (response_format json_object), nested at most kMaxJsonObjectDepth deep.
LangPtr json_object_language();

}  // namespace hearth::structured
