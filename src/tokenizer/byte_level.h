// GPT-2's byte-level alphabet: every byte has a printable stand-in character, so a byte-level BPE
// vocabulary spells arbitrary bytes as ordinary strings ("Ġ" is the space byte 0x20, "Ċ" is '\n').
#pragma once

#include <string>
#include <string_view>

namespace serve8 {

// Each byte of `bytes` replaced by its stand-in character (UTF-8, 1 or 2 bytes each).
std::string byte_level_encode(std::string_view bytes);

// The bytes spelled by `token` when every character of it is a stand-in; false (and `out`
// unchanged) when a character is outside the alphabet or `token` is not valid UTF-8.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace serve8
