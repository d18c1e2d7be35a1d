// Fuzzes the tokenizers on arbitrary bytes: the Llama-2 SentencePiece model (shared/models/
// llama2-tokenizer) and a byte-level BPE tokenizer.json (tests/golden/bpe/llama3). For each:
// encode the bytes (with and without special tokens), check every id is in the vocabulary, decode
// the ids both ways, and decode the raw bytes read as 16-bit ids (ids outside the vocabulary must
// throw serve8::Error, as documented). For the byte-level tokenizer, valid UTF-8 must come back
// unchanged from decode(encode(text)); encode may refuse only text that is not UTF-8 (byte-level
// BPE does, with serve8::Error). The first byte picks the flags; the rest is the text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

namespace {

struct Loaded {
  std::unique_ptr<serve8::Tokenizer> spm, bpe;
};

const Loaded& tokenizers() {
  static const Loaded loaded = [] {
    const char* env = std::getenv("SERVE8_SHARED_DIR");
    const std::string shared = env != nullptr && *env != '\0' ? env : SERVE8_SHARED_DIR;
    Loaded l;
    l.spm = serve8::load_tokenizer(shared + "/models/llama2-tokenizer");
    l.bpe = serve8::load_tokenizer(std::string(SERVE8_SOURCE_DIR) + "/tests/golden/bpe/llama3");
    return l;
  }();
  return loaded;
}

void exercise(const serve8::Tokenizer& tok, std::string_view text, uint8_t flags, bool round_trip) {
  const int vocab = tok.vocab_size();
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, (flags & 1) != 0);
  } catch (const serve8::Error&) {
    // Byte-level BPE refuses text that is not UTF-8 (the server answers 400); nothing else may throw.
    if (serve8::is_valid_utf8(text)) throw;
  }
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) std::abort();  // encode produced an id outside the vocabulary
  const std::string skipped = tok.decode(ids, true);
  const std::string kept = tok.decode(ids, false);
  if (!serve8::is_valid_utf8(skipped) || !serve8::is_valid_utf8(kept)) std::abort();  // decode promises UTF-8
  if (round_trip && (flags & 1) == 0 && serve8::is_valid_utf8(text) && kept != text) std::abort();

  // The same bytes as 16-bit ids, some outside the vocabulary.
  std::vector<int32_t> raw(text.size() / 2);
  for (size_t i = 0; i < raw.size(); ++i) {
    int16_t v;
    std::memcpy(&v, text.data() + 2 * i, 2);
    raw[i] = v;
  }
  try {
    const std::string s = tok.decode(raw, (flags & 2) != 0);
    if (!serve8::is_valid_utf8(s)) std::abort();
  } catch (const serve8::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Loaded& t = tokenizers();
  exercise(*t.spm, text, flags, /*round_trip=*/false);
  exercise(*t.bpe, text, flags, /*round_trip=*/true);
  return 0;
}
