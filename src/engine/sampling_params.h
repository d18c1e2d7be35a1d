// SamplingParams: what a request asks of the sampler and of stopping, as SGLang's
// `sampling_params` names them. Parsed from JSON in server/, validated here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/grammar.h"

namespace serve8 {

constexpr int kMaxTopLogprobs = 20;  // OpenAI's top_logprobs bound

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = -1;
  float min_p = 0.0f;
  int max_new_tokens = 128;
  std::vector<std::string> stop;
  std::vector<int> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  std::optional<uint64_t> seed;
  // Penalties as OpenAI and vLLM define them: presence subtracts once from every token already
  // generated, frequency once per occurrence; repetition divides the positive logits (and
  // multiplies the negative ones) of every prompt and generated token. min_new_tokens holds EOS
  // and the stop tokens back until that many were generated. logit_bias adds to a token's logit.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  int min_new_tokens = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  // < 0: none; else each generated token's log probability and the `logprobs` (<= 20) most
  // likely tokens of its step.
  int logprobs = -1;
  // >= 0: also the log probabilities of the prompt's tokens from this position on (the first
  // token of a prompt has none: NaN), with the `logprobs` most likely tokens at each.
  int prompt_logprobs_start = -1;
  // Constrained decoding: the spec as asked, and the grammar the server compiled from it (shared
  // by the n choices of one request); the engine masks every token the grammar forbids.
  GrammarSpec grammar;
  std::shared_ptr<const Grammar> compiled_grammar;

  // Whether any of the five above changes the logits.
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f ||
           min_new_tokens > 0 || !logit_bias.empty();
  }

  // Returns an empty string when valid, else what is wrong ("temperature must be >= 0, got -1").
  std::string validate(int vocab_size) const;
};

}  // namespace serve8
