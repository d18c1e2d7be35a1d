// UTF-8 checks used where text leaves the engine (streamed chunks must never split a character),
// and the encoder of one code point.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace serve8 {

// True when `text` is well-formed UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF,
// no truncated sequence.
bool is_valid_utf8(std::string_view text);

// Length in bytes of a trailing sequence that is a correct start of a character but lacks its
// last continuation bytes (0..3); 0 when the text ends on a character boundary or in bytes that
// can never become valid. More bytes may complete such a suffix, so streams hold it back.
std::size_t incomplete_utf8_suffix_length(std::string_view text);

// The longest prefix of `text` that is valid UTF-8 (cut at the first malformed or truncated
// sequence).
std::string truncate_to_valid_utf8(std::string_view text);

// `text` with each maximal ill-formed subsequence replaced by one U+FFFD (Unicode's recommended
// practice, and what Rust's from_utf8_lossy and so HF's byte-level decoder do), or with one U+FFFD
// per ill-formed byte (`per_byte`, what SentencePiece's decoder does).
std::string replace_invalid_utf8(std::string_view text, bool per_byte = false);

// Byte offset of the first ill-formed or truncated sequence, or text.size() when there is none.
std::size_t first_invalid_utf8(std::string_view text);

// Appends code point cp (at most U+10FFFF) as UTF-8.
void append_utf8(std::string& out, char32_t cp);

}  // namespace serve8
