#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/test_util.h"
#include "core/utf8.h"

namespace serve8 {
namespace {

const SentencePieceTokenizer& llama2() {
  static const SentencePieceTokenizer tokenizer(testing::llama2_tokenizer_model());
  return tokenizer;
}

// Streams `ids` one at a time; returns every non-empty chunk, the flush last.
std::vector<std::string> stream(const std::vector<int32_t>& ids, bool skip_special_tokens = true,
                                const std::vector<int32_t>& context = {}) {
  IncrementalDetokenizer detok(llama2(), skip_special_tokens, context);
  std::vector<std::string> chunks;
  for (int32_t id : ids) {
    std::string chunk = detok.push(id);
    if (!chunk.empty()) chunks.push_back(std::move(chunk));
  }
  std::string tail = detok.flush();
  if (!tail.empty()) chunks.push_back(std::move(tail));
  EXPECT_EQ(detok.num_tokens_pushed(), ids.size());
  return chunks;
}

std::string join(const std::vector<std::string>& chunks) {
  std::string out;
  for (const auto& c : chunks) out += c;
  return out;
}

// The two promises: the chunks add up to decode(ids), and each chunk is whole characters.
void expect_streams_like_decode(const std::vector<int32_t>& ids, bool skip_special_tokens) {
  const auto chunks = stream(ids, skip_special_tokens);
  EXPECT_EQ(join(chunks), llama2().decode(ids, skip_special_tokens));
  for (const auto& c : chunks) EXPECT_TRUE(is_valid_utf8(c)) << "chunk splits a character";
}

const std::vector<std::string> kTexts = {
    "Hello world, this is a test.",
    "Ünïcödé façade — naïve café 日本語 🙂",
    "emoji 🎉🚀👍🏽 and a family 👨‍👩‍👧 end",
    "🙂 at the start",
    "  leading spaces and\ttabs",
    "line one\nline two\n\n  indented",
    "中文文本，日本語のテキスト、한국어 텍스트",
    "math ∑∫√∞ ≠ ≤ and arrows →⇒",
};

TEST(IncrementalDetokenizer, TextsStreamLikeDecode) {
  for (const auto& text : kTexts) {
    SCOPED_TRACE(text);
    for (bool bos : {false, true}) {
      auto ids = llama2().encode(text, bos);
      expect_streams_like_decode(ids, true);
      expect_streams_like_decode(ids, false);
      ids.push_back(llama2().eos_id());
      expect_streams_like_decode(ids, true);
      expect_streams_like_decode(ids, false);
    }
  }
}

TEST(IncrementalDetokenizer, HoldsBackByteFallbackUntilTheCharacterIsWhole) {
  // Llama-2 has no piece for 🙂: it is "▁" then the bytes F0 9F 99 82 (ids 243 162 156 133).
  const auto ids = llama2().encode("a 🙂 b", false);
  const std::vector<int32_t> emoji_bytes = {243, 162, 156, 133};
  ASSERT_NE(std::search(ids.begin(), ids.end(), emoji_bytes.begin(), emoji_bytes.end()), ids.end());

  IncrementalDetokenizer detok(llama2());
  std::string out;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(chunk));
    EXPECT_EQ(chunk.find("\xEF\xBF\xBD"), std::string::npos) << "emitted a placeholder for a partial character";
    out += chunk;
  }
  out += detok.flush();
  EXPECT_EQ(out, "a 🙂 b");
}

TEST(IncrementalDetokenizer, LeadingSpaceOnlyStrippedAtTheStart) {
  // ▁Hello ▁world: "Hello" then " world", not "Hello" then "world".
  EXPECT_EQ(stream({15043, 3186}), (std::vector<std::string>{"Hello", " world"}));
  // A BOS before changes nothing when skipped, and prints with a space after it otherwise.
  EXPECT_EQ(join(stream({1, 15043, 3186})), "Hello world");
  EXPECT_EQ(join(stream({1, 15043, 3186}, false)), "<s> Hello world");
}

TEST(IncrementalDetokenizer, FlushEmitsAnUnfinishedCharacter) {
  IncrementalDetokenizer detok(llama2());
  EXPECT_EQ(detok.push(15043), "Hello");
  EXPECT_EQ(detok.push(243), "");  // F0: the start of a 4-byte character
  EXPECT_EQ(detok.push(162), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");  // what decode prints for the two bytes
  EXPECT_EQ(llama2().decode(std::vector<int32_t>{15043, 243, 162}), "Hello\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(IncrementalDetokenizer, RejectedIdLeavesTheStreamUsable) {
  IncrementalDetokenizer detok(llama2());
  EXPECT_EQ(detok.push(15043), "Hello");
  EXPECT_THROW(detok.push(32000), Error);
  EXPECT_EQ(detok.push(3186), " world");
  EXPECT_EQ(detok.num_tokens_pushed(), 2u);
}

TEST(IncrementalDetokenizer, ContextKeepsTheSpaceBeforeTheFirstOutputToken) {
  const auto all = llama2().encode("The capital of France is Paris", true);
  const std::vector<int32_t> context(all.begin(), all.end() - 1);
  const std::vector<int32_t> output(all.end() - 1, all.end());
  ASSERT_EQ(llama2().id_to_piece(output[0]), "▁Paris");
  EXPECT_EQ(join(stream(output, true, context)), " Paris");
  EXPECT_EQ(join(stream(output, true)), "Paris");
}

// Random ids, dense in byte-fallback and special tokens, must keep both promises too: this is what
// a badly sampling model can send.
TEST(IncrementalDetokenizer, RandomIdsStreamLikeDecode) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int32_t> special(0, 2), byte(3, 258), any(259, 31999);
  std::uniform_int_distribution<int> length(1, 40);
  int checked_with_context = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids(length(rng));
    for (auto& id : ids) {
      const int k = kind(rng);
      id = k == 0 ? special(rng) : k < 5 ? byte(rng) : any(rng);
      if (id == 259 || id == 29871) id = 29871;  // "▁▁" / "▁": spaces whose stripping is the tricky part
    }
    SCOPED_TRACE(trial);
    expect_streams_like_decode(ids, true);
    expect_streams_like_decode(ids, false);

    // With context the stream is the part of decode(context + ids) beyond decode(context).
    std::vector<int32_t> context(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(ids.size() / 3));
    std::vector<int32_t> rest(ids.begin() + static_cast<std::ptrdiff_t>(context.size()), ids.end());
    const std::string full = llama2().decode(ids);
    const std::string head = llama2().decode(context);
    const auto chunks = stream(rest, true, context);
    for (const auto& c : chunks) EXPECT_TRUE(is_valid_utf8(c)) << "chunk splits a character";
    if (full.starts_with(head) && !head.ends_with("\xEF\xBF\xBD")) {
      EXPECT_EQ(join(chunks), full.substr(head.size()));
      ++checked_with_context;
    }
  }
  EXPECT_GT(checked_with_context, 100);
}

TEST(IncrementalDetokenizer, ContextEndingInsideACharacterLeavesItToTheOutput) {
  // The prompt ids end with F0 9F, the first half of 🙂; the output brings 99 82.
  std::vector<int32_t> context = llama2().encode("Smile:", true);
  context.insert(context.end(), {243, 162});
  const auto chunks = stream({156, 133, 3186}, true, context);
  EXPECT_EQ(join(chunks), "🙂 world");
  for (const auto& c : chunks) EXPECT_TRUE(is_valid_utf8(c));
}

TEST(IncrementalDetokenizer, RealisticTextWithSpacesAndBytes) {
  // A spread of the vocabulary's real patterns: the single "▁" piece before byte-fallback runs.
  std::mt19937 rng(99);
  for (int trial = 0; trial < 100; ++trial) {
    std::string text;
    std::uniform_int_distribution<size_t> pick(0, kTexts.size() - 1);
    for (int i = 0; i < 3; ++i) text += kTexts[pick(rng)] + (i % 2 ? " " : "\n");
    expect_streams_like_decode(llama2().encode(text, true), true);
  }
}

}  // namespace
}  // namespace serve8
