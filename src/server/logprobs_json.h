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

}  // namespace serve8
