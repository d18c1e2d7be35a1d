// Grammars over real vocabularies: the bytes each token stands for, masks that allow exactly the
// tokens a grammar can take next, and matchers driven by tokenized texts that do and do not fit.
#include "tokenizer/grammar.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/bpe/bpe_test_util.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {
namespace {

const Tokenizer& llama2() {
  static const auto tok = load_tokenizer(std::string(SERVE8_SHARED_DIR) + "/models/llama2-tokenizer");
  return *tok;
}

int id_of_bytes(const Tokenizer& tok, const std::string& bytes) {
  for (int id = 0; id < tok.vocab_size(); ++id)
    if (tok.token_bytes(id) == bytes) return id;
  return -1;
}

TEST(TokenBytes, SentencePieceSpacesBytesAndControls) {
  const Tokenizer& tok = llama2();
  EXPECT_EQ(tok.token_bytes(tok.encode("Hello", false).at(0)), " Hello");  // "▁Hello"
  EXPECT_EQ(tok.token_bytes(13), "\n");                                     // "<0x0A>"
  EXPECT_EQ(tok.token_bytes(tok.bos_id()), "");
  EXPECT_EQ(tok.token_bytes(tok.eos_ids().at(0)), "");
  EXPECT_THROW(tok.token_bytes(tok.vocab_size()), Error);
}

TEST(TokenBytes, ByteLevelSpacesAndSpecials) {
  const std::string path = testing::smollm2_gguf();
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found under " << testing::models_dir();
  const auto tok = load_tokenizer(path);
  const std::vector<int32_t> ids = tok->encode("Hello world\n", false);
  std::string joined;
  for (int32_t id : ids) joined += tok->token_bytes(id);
  EXPECT_EQ(joined, "Hello world\n");
  for (int id : tok->eos_ids()) EXPECT_EQ(tok->token_bytes(id), "") << id;
}

// `text` one character a token: a tokenization without SentencePiece's leading "▁", as text in
// the middle of an output is.
std::vector<int32_t> char_tokens(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  for (char c : text) {
    ids.push_back(id_of_bytes(tok, std::string(1, c)));
    EXPECT_GE(ids.back(), 0) << "no token for '" << c << "'";
  }
  return ids;
}

// Feeds `text`'s tokens to a matcher, each checked against the mask first; returns how many the
// grammar took before refusing one (all of them when it fits).
size_t feed(GrammarMatcher& m, const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> words(static_cast<size_t>(m.mask_words()));
  const std::vector<int32_t> ids = char_tokens(tok, text);
  for (size_t i = 0; i < ids.size(); ++i) {
    m.fill_next_mask(words);
    const bool allowed = mask_allows(words, ids[i]);
    EXPECT_EQ(allowed, m.accept(ids[i])) << "the mask and the matcher disagree on token " << ids[i];
    if (!allowed) return i;
  }
  return ids.size();
}

TEST(Grammar, RegexMaskAllowsDigitsThenOnlyStop) {
  const Tokenizer& tok = llama2();
  GrammarCompiler compiler(tok, tok.vocab_size(), tok.eos_ids());
  const auto g = compiler.compile({GrammarSpec::Kind::kRegex, "[0-9]{3}", "regex"});
  GrammarMatcher m(g);
  std::vector<int32_t> words(static_cast<size_t>(m.mask_words()));
  ASSERT_EQ(words.size(), (static_cast<size_t>(tok.vocab_size()) + 31) / 32);
  EXPECT_TRUE(m.fill_next_mask(words));
  const int one = id_of_bytes(tok, "1"), hello = tok.encode("Hello", false).at(0);
  ASSERT_GE(one, 0);
  EXPECT_TRUE(mask_allows(words, one));
  EXPECT_FALSE(mask_allows(words, hello));
  EXPECT_FALSE(mask_allows(words, tok.eos_ids().at(0)));  // not before three digits
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(m.accept(one));
  m.fill_next_mask(words);
  int allowed = 0;
  for (int id = 0; id < tok.vocab_size(); ++id) allowed += mask_allows(words, id);
  EXPECT_EQ(allowed, 1);
  EXPECT_TRUE(mask_allows(words, tok.eos_ids().at(0)));
  EXPECT_FALSE(m.accept(one));
  EXPECT_FALSE(m.terminated());
  EXPECT_TRUE(m.accept(tok.eos_ids().at(0)));
  EXPECT_TRUE(m.terminated());
}

TEST(Grammar, JsonSchemaTakesFittingTextAndRefusesTheRest) {
  const Tokenizer& tok = llama2();
  GrammarCompiler compiler(tok, tok.vocab_size() + 64, tok.eos_ids());  // a padded LM head
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "age": {"type": "integer"}}, "required": ["name", "age"], "additionalProperties": false})";
  const auto g = compiler.compile({GrammarSpec::Kind::kJsonSchema, schema, "json_schema"});
  {
    GrammarMatcher m(g);
    std::vector<int32_t> words(static_cast<size_t>(m.mask_words()));
    m.fill_next_mask(words);
    for (int id = tok.vocab_size(); id < tok.vocab_size() + 64; ++id) EXPECT_FALSE(mask_allows(words, id)) << id;
    const std::string text = R"({"name": "Ada", "age": 36})";
    EXPECT_EQ(feed(m, tok, text), text.size());
    EXPECT_TRUE(m.accept(tok.eos_ids().at(0)));
    EXPECT_TRUE(m.terminated());
  }
  for (const std::string bad : {R"({"name": "Ada", "age": "36"})", R"({"age": 36, "nick": "A"})", R"([1, 2])"}) {
    GrammarMatcher m(g);
    EXPECT_LT(feed(m, tok, bad), bad.size()) << bad;
  }
}

TEST(Grammar, JsonObjectEbnfAndStructuralTag) {
  const Tokenizer& tok = llama2();
  GrammarCompiler compiler(tok, tok.vocab_size(), tok.eos_ids());
  GrammarMatcher any_json(compiler.compile({GrammarSpec::Kind::kJsonObject, "", "response_format"}));
  EXPECT_EQ(feed(any_json, tok, R"({"a": [1, 2.5, null]})"), std::string(R"({"a": [1, 2.5, null]})").size());
  GrammarMatcher ebnf(compiler.compile({GrammarSpec::Kind::kEbnf, R"(root ::= "yes" | "no")", "ebnf"}));
  EXPECT_EQ(feed(ebnf, tok, "maybe"), 0u);
  const std::string tag = R"({"type": "structural_tag", "format": {"type": "tag", "begin": "<a>",
      "content": {"type": "json_schema", "json_schema": {"type": "integer"}}, "end": "</a>"}})";
  GrammarMatcher st(compiler.compile({GrammarSpec::Kind::kStructuralTag, tag, "structural_tag"}));
  EXPECT_EQ(feed(st, tok, "<a>42</a>"), 9u);
}

TEST(Grammar, WhatDoesNotCompileSaysWhy) {
  const Tokenizer& tok = llama2();
  GrammarCompiler compiler(tok, tok.vocab_size(), tok.eos_ids());
  EXPECT_THROW(compiler.compile({GrammarSpec::Kind::kRegex, "[0-9", "regex"}), Error);
  EXPECT_THROW(compiler.compile({GrammarSpec::Kind::kJsonSchema, "{not json", "json_schema"}), Error);
  EXPECT_THROW(compiler.compile({GrammarSpec::Kind::kEbnf, "root ::= undefined_rule", "ebnf"}), Error);
  try {
    compiler.compile({GrammarSpec::Kind::kRegex, "(a", "regex"});
    FAIL() << "an unclosed group compiled";
  } catch (const Error& e) {
    // The reason alone: no timestamp, source path or trailing newline of xgrammar's log format.
    const std::string what = e.what();
    EXPECT_FALSE(what.empty());
    EXPECT_EQ(what.find(".cc:"), std::string::npos) << what;
    EXPECT_NE(what.front(), '[') << what;
    EXPECT_NE(what.back(), '\n') << what;
  }
}

}  // namespace
}  // namespace serve8
