#include "tokenizer/byte_level.h"

#include <array>
#include <cstdint>

namespace serve8 {
namespace {

// Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD) are
// given the code points from U+0100 on, in byte order. That is GPT-2's table.
bool stands_for_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<uint32_t, 256> code_point{};  // byte -> stand-in
  std::array<int16_t, 0x144> byte{};       // stand-in code point (all below U+0144) -> byte, or -1
  std::array<std::string, 256> utf8;       // byte -> stand-in as UTF-8
};

std::string to_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    t.byte.fill(-1);
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = stands_for_itself(b) ? static_cast<uint32_t>(b) : next++;
      t.code_point[b] = cp;
      t.byte[cp] = static_cast<int16_t>(b);
      t.utf8[b] = to_utf8(cp);
    }
    return t;
  }();
  return t;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.utf8[static_cast<uint8_t>(c)];
  return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
  const Tables& t = tables();
  std::string bytes;
  bytes.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    uint32_t cp = 0;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size() && (static_cast<uint8_t>(token[i + 1]) & 0xC0) == 0x80) {
      cp = ((b0 & 0x1Fu) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3Fu);
      if (cp < 0x80) return false;  // overlong
      i += 2;
    } else {
      return false;  // three- and four-byte characters are never stand-ins
    }
    if (cp >= t.byte.size() || t.byte[cp] < 0) return false;
    bytes += static_cast<char>(t.byte[cp]);
  }
  out += bytes;
  return true;
}

}  // namespace serve8
