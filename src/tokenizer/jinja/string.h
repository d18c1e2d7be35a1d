// Python str semantics over UTF-8 bytes, for the Jinja evaluator: Python indexes, slices and
// measures strings in code points and strips "whitespace" by str.isspace(), so a byte-wise version
// would differ on any non-ASCII message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"  // append_utf8

namespace serve8::jinja {

// Byte offset of each code point, plus s.size() at the end (so there are num_code_points + 1).
std::vector<std::size_t> code_point_offsets(std::string_view s);
std::size_t num_code_points(std::string_view s);
// Decodes the code point at s[pos], advancing pos; invalid bytes decode as themselves.
char32_t decode_code_point(std::string_view s, std::size_t& pos);

// Python's str.isspace().
bool is_py_space(char32_t cp);

// Byte range [begin, end) left after Python's str.strip() (chars empty: whitespace; else the
// code points in chars).
struct StripRange {
  std::size_t begin;
  std::size_t end;
};
StripRange strip_range(std::string_view s, std::string_view chars, bool left, bool right);

// Python's str.split(sep, maxsplit) as byte ranges (sep empty: split on whitespace runs).
std::vector<StripRange> split_ranges(std::string_view s, std::string_view sep, long maxsplit);

// Case mapping covers ASCII, Latin-1, Greek and Cyrillic; other scripts keep their case.
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);  // str.title()
// jinja2's title filter: words split at whitespace and "-([{<", each capitalized.
std::string jinja_title(std::string_view s);

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, long count);

}  // namespace serve8::jinja
