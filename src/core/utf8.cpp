#include "core/utf8.h"

#include <cstdint>

namespace serve8 {
namespace {

// Bytes the character starting with `lead` needs (1..4), or 0 for a byte that cannot lead one.
int sequence_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // a continuation byte, an overlong lead (C0, C1) or past U+10FFFF (F5..FF)
}

// The allowed range of the second byte depends on the lead: it is what excludes overlong forms,
// UTF-16 surrogates and code points past U+10FFFF (RFC 3629's table).
bool second_byte_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0:
      return b >= 0xA0 && b <= 0xBF;
    case 0xED:
      return b >= 0x80 && b <= 0x9F;
    case 0xF0:
      return b >= 0x90 && b <= 0xBF;
    case 0xF4:
      return b >= 0x80 && b <= 0x8F;
    default:
      return b >= 0x80 && b <= 0xBF;
  }
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

enum class Scan { kComplete, kTruncated, kMalformed };

// Checks the sequence at text[pos]; on kComplete sets `len` to its length, on kTruncated the
// bytes present are a correct beginning that ends with the text.
// Otherwise `len` is the length of the maximal subpart: the bytes that were a correct beginning.
Scan scan_one(std::string_view text, std::size_t pos, std::size_t& len) {
  const auto lead = static_cast<uint8_t>(text[pos]);
  const int need = sequence_length(lead);
  len = 1;
  if (need == 0) return Scan::kMalformed;
  for (int i = 1; i < need; ++i) {
    if (pos + i >= text.size()) return Scan::kTruncated;
    const auto b = static_cast<uint8_t>(text[pos + i]);
    const bool ok = i == 1 ? second_byte_ok(lead, b) : is_continuation(b);
    if (!ok) return Scan::kMalformed;
    len = static_cast<std::size_t>(i + 1);
  }
  len = static_cast<std::size_t>(need);
  return Scan::kComplete;
}

// Length of the valid prefix; `truncated` tells whether scanning stopped at a correct but
// unfinished final sequence.
std::size_t valid_prefix_length(std::string_view text, bool& truncated) {
  std::size_t pos = 0;
  truncated = false;
  while (pos < text.size()) {
    std::size_t len = 0;
    const Scan s = scan_one(text, pos, len);
    if (s != Scan::kComplete) {
      truncated = s == Scan::kTruncated;
      return pos;
    }
    pos += len;
  }
  return pos;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  bool truncated = false;
  return valid_prefix_length(text, truncated) == text.size();
}

std::size_t incomplete_utf8_suffix_length(std::string_view text) {
  // A character is at most 4 bytes, so only a lead within the last 3 bytes can be unfinished.
  const std::size_t n = text.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const std::size_t pos = n - back;
    const auto b = static_cast<uint8_t>(text[pos]);
    if (is_continuation(b)) continue;
    std::size_t len = 0;
    return scan_one(text, pos, len) == Scan::kTruncated ? back : 0;
  }
  return 0;
}

std::string truncate_to_valid_utf8(std::string_view text) {
  bool truncated = false;
  return std::string(text.substr(0, valid_prefix_length(text, truncated)));
}

std::string replace_invalid_utf8(std::string_view text, bool per_byte) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t len = 0;
    const Scan s = scan_one(text, pos, len);
    if (s == Scan::kComplete) {
      out.append(text.substr(pos, len));
    } else {
      if (per_byte) len = 1;
      out += kReplacement;
    }
    pos += len;
  }
  return out;
}

std::size_t first_invalid_utf8(std::string_view text) {
  bool truncated = false;
  return valid_prefix_length(text, truncated);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace serve8
