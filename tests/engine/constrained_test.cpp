// Constrained decoding through the CPU engine on SmolLM2-135M-Instruct: sampled outputs (several
// requests in one batch, some unconstrained beside them) match their regex or parse against their
// JSON schema, and end when the grammar does.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/engine.h"
#include "stories_fixture.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {
namespace {

std::string smollm2() {
  const char* env = std::getenv("SERVE8_MODELS_DIR");
  const auto p = (env && *env ? std::filesystem::path(env) : std::filesystem::path(SERVE8_SOURCE_DIR) / ".models") /
                 "SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::is_regular_file(p) ? p.string() : "";
}

class Constrained : public ::testing::Test {
 protected:
  void SetUp() override {
    if (smollm2().empty()) GTEST_SKIP() << "no SmolLM2 GGUF (scripts/setup.sh fetches it)";
    EngineArgs a;
    a.model_path = smollm2();
    a.device = "cpu";
    a.max_total_tokens = 8192;
    a.scheduler.max_running_requests = 16;
    engine_ = create_engine(a);
    tok_ = engine_->tokenizer();
    compiler_ = std::make_unique<GrammarCompiler>(*tok_, engine_->model_config().vocab_size, tok_->eos_ids());
  }
  std::vector<int32_t> chat(const std::string& user) const {
    return tok_->encode_chat({{"user", user}}, true);
  }
  SamplingParams constrained(GrammarSpec::Kind kind, const std::string& text, uint64_t seed) const {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = seed;
    p.max_new_tokens = 96;
    p.grammar = {kind, text, "test"};
    p.compiled_grammar = compiler_->compile(p.grammar);
    return p;
  }
  std::string text(const std::vector<int32_t>& ids) const { return tok_->decode(ids, true); }

  std::unique_ptr<Engine> engine_;
  const Tokenizer* tok_ = nullptr;
  std::unique_ptr<GrammarCompiler> compiler_;
};

TEST_F(Constrained, RegexOutputsMatchAndEndWithTheGrammar) {
  const std::string re = "(yes|no), [0-9]{2,4} [a-z]{1,8}\\.";
  std::vector<std::vector<int32_t>> outs;
  for (uint64_t s = 0; s < 4; ++s)  // one at a time: each seed's draw is its own
    outs.push_back(testing::generate_all(*engine_, {chat("Is the sky blue? Answer and give a number.")},
                                         constrained(GrammarSpec::Kind::kRegex, re, s + 1))[0]);
  for (const auto& ids : outs) {
    ASSERT_FALSE(ids.empty());
    EXPECT_TRUE(tok_->is_eos(ids.back())) << "ended by the grammar, not the length";
    EXPECT_TRUE(std::regex_match(text(ids), std::regex(re))) << text(ids);
  }
}

TEST_F(Constrained, JsonSchemaInABatchBesideFreeRequests) {
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"],
      "additionalProperties": false})";
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint64_t s = 0; s < 8; ++s) {
    SamplingParams p = s % 2 ? constrained(GrammarSpec::Kind::kJsonSchema, schema, s) : SamplingParams{};
    if (s % 2 == 0) p.max_new_tokens = 24;
    streams.push_back(engine_->submit(chat("Describe a person as JSON."), p));
  }
  engine_->run_until_idle();
  for (size_t i = 1; i < streams.size(); i += 2) {
    std::vector<int32_t> ids;
    for (;;) {
      auto ev = streams[i]->next(std::chrono::milliseconds(0));
      ASSERT_TRUE(ev.has_value());
      ids.insert(ids.end(), ev->new_ids.begin(), ev->new_ids.end());
      if (ev->finished) break;
    }
    const std::string out = text(ids);
    const nlohmann::json j = nlohmann::json::parse(out);  // throws (fails) when it does not parse
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_EQ(j.size(), 2u) << out;
    EXPECT_TRUE(j.at("name").is_string()) << out;
    EXPECT_LE(j.at("name").get<std::string>().size(), 12u) << out;
    ASSERT_TRUE(j.at("age").is_number_integer()) << out;
    EXPECT_GE(j.at("age").get<int>(), 0);
    EXPECT_LE(j.at("age").get<int>(), 120);
  }
}

// A grammar that ends takes the request with it even when EOS is ignored.
TEST_F(Constrained, IgnoreEosStillEndsWithTheGrammar) {
  SamplingParams p = constrained(GrammarSpec::Kind::kRegex, "ok", 3);
  p.ignore_eos = true;
  const auto ids = testing::generate_all(*engine_, {chat("Say ok.")}, p)[0];
  EXPECT_EQ(text(ids), "ok");
  EXPECT_LE(ids.size(), 3u);
}

}  // namespace
}  // namespace serve8
