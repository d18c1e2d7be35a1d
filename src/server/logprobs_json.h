// Log probabilities in the shapes clients read: OpenAI chat's "logprobs.content", the legacy
// completions object (both without a matched stop token, which is not text), and SGLang's
// meta_info lists (every output id). Tokens [begin, end) of an output.
#pragma once

#include <cstddef>

#include "server/json_params.h"
#include "server/text_output.h"

namespace serve8 {

Json chat_logprobs(const Tokenizer* tok, const TextOutput& out, size_t begin, size_t end);
// text_offset starts at `offset` (the echoed prompt's length, or 0).
Json completion_logprobs(const Tokenizer* tok, const TextOutput& out, size_t begin, size_t end, size_t offset);
// meta_info's output_token_logprobs and output_top_logprobs ([logprob, id, text or null] each).
void add_sglang_logprobs(const Tokenizer* tok, const TextOutput& out, bool with_text, Json& meta);
// meta_info's input_token_logprobs and input_top_logprobs: prompt tokens from `start` on (the
// prompt's first token has no log probability: null).
void add_sglang_prompt_logprobs(const Tokenizer* tok, const TextOutput& out, std::span<const int32_t> prompt,
                                size_t start, bool with_text, Json& meta);
// Completions' echo with logprobs: the prompt's tokens, then the output's [0, end), in one legacy
// object (text offsets count from the prompt's first token).
Json echo_completion_logprobs(const Tokenizer* tok, const TextOutput& out, std::span<const int32_t> prompt, size_t end);

}  // namespace serve8
