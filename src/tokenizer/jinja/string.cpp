#include "tokenizer/jinja/string.h"

#include <algorithm>

namespace serve8::jinja {

char32_t decode_code_point(std::string_view s, std::size_t& pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b0 = byte(pos);
  int len = 1;
  char32_t cp = b0;
  if (b0 >= 0xF0 && b0 < 0xF8) {
    len = 4;
    cp = b0 & 0x07;
  } else if (b0 >= 0xE0) {
    len = 3;
    cp = b0 & 0x0F;
  } else if (b0 >= 0xC0) {
    len = 2;
    cp = b0 & 0x1F;
  }
  if (len > 1) {
    if (pos + len > s.size()) len = 1;
    for (int i = 1; i < len; ++i) {
      if ((byte(pos + i) & 0xC0) != 0x80) {
        len = 1;
        break;
      }
      cp = (cp << 6) | (byte(pos + i) & 0x3F);
    }
    if (len == 1) cp = b0;
  }
  pos += len;
  return cp;
}

std::vector<std::size_t> code_point_offsets(std::string_view s) {
  std::vector<std::size_t> offsets;
  offsets.reserve(s.size() + 1);
  std::size_t pos = 0;
  while (pos < s.size()) {
    offsets.push_back(pos);
    decode_code_point(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

std::size_t num_code_points(std::string_view s) {
  std::size_t n = 0;
  for (std::size_t pos = 0; pos < s.size(); ++n) decode_code_point(s, pos);
  return n;
}

bool is_py_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

bool in_chars(char32_t cp, std::string_view chars) {
  for (std::size_t pos = 0; pos < chars.size();) {
    if (decode_code_point(chars, pos) == cp) return true;
  }
  return false;
}

bool strippable(char32_t cp, std::string_view chars) { return chars.empty() ? is_py_space(cp) : in_chars(cp, chars); }

// Simple one-to-one case pairs; enough for the roles, names and languages templates transform.
char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t c) { return to_upper_cp(c) != c || to_lower_cp(c) != c || c == 0xDF; }

template <typename Map>
std::string map_code_points(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t pos = 0; pos < s.size();) append_utf8(out, map(decode_code_point(s, pos)));
  return out;
}

}  // namespace

StripRange strip_range(std::string_view s, std::string_view chars, bool left, bool right) {
  std::size_t begin = 0;
  std::size_t end = s.size();
  if (left) {
    while (begin < end) {
      std::size_t next = begin;
      if (!strippable(decode_code_point(s, next), chars)) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      std::size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      std::size_t pos = start;
      if (!strippable(decode_code_point(s, pos), chars)) break;
      end = start;
    }
  }
  return {begin, end};
}

std::vector<StripRange> split_ranges(std::string_view s, std::string_view sep, long maxsplit) {
  std::vector<StripRange> parts;
  if (!sep.empty()) {
    std::size_t start = 0;
    while (maxsplit < 0 || static_cast<long>(parts.size()) < maxsplit) {
      const std::size_t hit = s.find(sep, start);
      if (hit == std::string_view::npos) break;
      parts.push_back({start, hit});
      start = hit + sep.size();
    }
    parts.push_back({start, s.size()});
    return parts;
  }
  std::size_t pos = 0;
  while (pos < s.size()) {
    // Skip a whitespace run, then take a word (the last split takes the rest as it is).
    std::size_t next = pos;
    if (is_py_space(decode_code_point(s, next))) {
      pos = next;
      continue;
    }
    if (maxsplit >= 0 && static_cast<long>(parts.size()) == maxsplit) {
      parts.push_back({pos, s.size()});
      break;
    }
    std::size_t end = pos;
    while (end < s.size()) {
      std::size_t after = end;
      if (is_py_space(decode_code_point(s, after))) break;
      end = after;
    }
    parts.push_back({pos, end});
    pos = end;
  }
  return parts;
}

std::string py_upper(std::string_view s) {
  std::string out;
  for (std::size_t pos = 0; pos < s.size();) {
    const char32_t c = decode_code_point(s, pos);
    if (c == 0xDF) {
      out += "SS";
    } else {
      append_utf8(out, to_upper_cp(c));
    }
  }
  return out;
}

std::string py_lower(std::string_view s) { return map_code_points(s, to_lower_cp); }

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (std::size_t pos = 0; pos < s.size(); first = false) {
    const char32_t c = decode_code_point(s, pos);
    append_utf8(out, first ? to_upper_cp(c) : to_lower_cp(c));
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (std::size_t pos = 0; pos < s.size();) {
    const char32_t c = decode_code_point(s, pos);
    append_utf8(out, previous_cased ? to_lower_cp(c) : to_upper_cp(c));
    previous_cased = is_cased(c);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (std::size_t pos = 0; pos < s.size();) {
    const char32_t c = decode_code_point(s, pos);
    const bool separator = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      append_utf8(out, c);
      word_start = true;
    } else {
      append_utf8(out, word_start ? to_upper_cp(c) : to_lower_cp(c));
      word_start = false;
    }
  }
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, long count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement between code points and at both ends.
    long done = 0;
    std::size_t pos = 0;
    while (true) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (pos >= s.size()) break;
      const std::size_t start = pos;
      decode_code_point(s, pos);
      out += s.substr(start, pos - start);
    }
    return out;
  }
  std::size_t start = 0;
  long done = 0;
  while (count < 0 || done < count) {
    const std::size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    out += s.substr(start, hit - start);
    out += replacement;
    start = hit + old.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

}  // namespace serve8::jinja
