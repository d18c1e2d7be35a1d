// Unicode Normalization Form C, for tokenizers whose normalizer is NFC (Qwen2's tokenizer.json).
#pragma once

#include <string>
#include <string_view>

namespace serve8 {

// `text` (valid UTF-8) in NFC: canonical decomposition, canonical ordering, then canonical
// composition. ASCII text comes back unchanged without a look at the tables.
std::string nfc_normalize(std::string_view text);

}  // namespace serve8
