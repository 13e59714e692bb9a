// UTF-8 text with Python `str` semantics: templates index, slice, strip and split strings by
// code point and use Python's definition of whitespace, so the bytes the interpreter produces
// match what jinja2 produces from the same text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"

namespace hearth::jinja::text {

// Decodes the code point at s[i] and advances i. Input is validated UTF-8 (template source
// and JSON strings both are), so a malformed byte decodes as itself rather than failing.
char32_t decode(std::string_view s, size_t& i);
// Encoding and validation are the project's one definition.
using hearth::append_utf8;
using hearth::is_valid_utf8;

// Number of code points (Python len()).
size_t length(std::string_view s);
bool is_ascii(std::string_view s);
std::vector<char32_t> code_points(std::string_view s);
std::string from_code_points(const char32_t* begin, const char32_t* end);

// Python str.isspace() for one code point (also what the regex \s matches).
bool is_space(char32_t cp);
// Python's \w for one code point: letters, digits and '_' (outside ASCII, approximated as
// anything that is not whitespace, punctuation or a symbol in the common blocks).
bool is_word(char32_t cp);
// Python str.isprintable() for one code point, approximated by ranges: controls, format
// characters, separators other than ' ', surrogates and private use are not printable.
bool is_printable(char32_t cp);

// str.strip / lstrip / rstrip. With `chars` == nullptr strips Python whitespace, otherwise any
// code point in *chars.
std::string strip(std::string_view s, const std::string* chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1) and str.split(sep, maxsplit).
std::vector<std::string> split_whitespace(std::string_view s, int64_t maxsplit);
std::vector<std::string> split(std::string_view s, std::string_view sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, std::string_view sep, int64_t maxsplit);
// str.splitlines() without keepends (the separators Python recognises).
std::vector<std::string> splitlines(std::string_view s);
// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code
// points, as Python does.
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);

// Case mapping as Python's str methods do it for Latin, Greek, Cyrillic, Armenian and
// fullwidth Latin (simple one-to-one mappings, plus ß -> SS); other scripts are left as they
// are, and the Greek final-sigma rule of lower() is not applied.
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);  // str.capitalize
std::string title(std::string_view s);       // str.title
bool is_lower(std::string_view s);           // str.islower
bool is_upper(std::string_view s);           // str.isupper

// Python repr() of a str: single quotes unless the text holds ' and no ", escapes for
// backslash, the quote, \n \r \t and non-printable code points (\xNN, \uNNNN, \UNNNNNNNN).
std::string py_repr(std::string_view s);

}  // namespace hearth::jinja::text
