#include "server/logprobs_json.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

namespace serve8 {

namespace {

// JSON has no infinity: a token the sampler could not draw gets -9999, as vLLM reports it. NaN
// marks the prompt's first token, which has none: null.
Json finite(float lp) {
  if (std::isnan(lp)) return nullptr;
  return std::isfinite(lp) ? lp : -9999.0;
}

std::string token_text(const Tokenizer* tok, int32_t id) {
  if (tok == nullptr) return fmt::format("token_id:{}", id);
  return tok->decode(std::span<const int32_t>(&id, 1), false);
}

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// A matched stop token is an output id but not text: OpenAI's logprobs leave it out.
size_t rendered_tokens(const TextOutput& out) {
  const size_t n = std::min(out.logprobs().size(), out.output_ids().size());
  return n > 0 && out.finished() && out.matched_token_id() >= 0 ? n - 1 : n;
}

Json legacy_lists() {
  return {{"tokens", Json::array()}, {"token_logprobs", Json::array()}, {"top_logprobs", Json::array()},
          {"text_offset", Json::array()}};
}

// Appends tokens ids[begin, end) and their log probabilities to the legacy completions lists; text
// offsets count from `offset`, which moves past ids[0, end). The prompt's first token (NaN) has a
// null top list.
void append_legacy(const Tokenizer* tok, std::span<const int32_t> ids, std::span<const RowLogprobs> lps, size_t begin,
                   size_t end, size_t& offset, Json& lists) {
  for (size_t i = 0; i < end; ++i) {
    const std::string t = token_text(tok, ids[i]);
    if (i >= begin) {
      lists["tokens"].push_back(t);
      lists["token_logprobs"].push_back(finite(lps[i].chosen));
      Json top = Json::object();
      for (const auto& [id, lp] : lps[i].top) top[token_text(tok, id)] = finite(lp);
      lists["top_logprobs"].push_back(std::isnan(lps[i].chosen) ? Json(nullptr) : top);
      lists["text_offset"].push_back(offset);
    }
    offset += t.size();
  }
}

// SGLang's [logprob, id, text or null] list of ids[i] with lps[i], and their top lists.
void sglang_lists(const Tokenizer* tok, std::span<const int32_t> ids, std::span<const RowLogprobs> lps, bool with_text,
                  Json& chosen, Json& tops) {
  chosen = Json::array();
  tops = Json::array();
  const auto text = [&](int32_t id) { return with_text ? Json(token_text(tok, id)) : Json(nullptr); };
  for (size_t i = 0; i < ids.size(); ++i) {
    chosen.push_back(Json::array({finite(lps[i].chosen), ids[i], text(ids[i])}));
    Json top = Json::array();
    for (const auto& [t, lp] : lps[i].top) top.push_back(Json::array({finite(lp), t, text(t)}));
    tops.push_back(std::isnan(lps[i].chosen) ? Json(nullptr) : top);
  }
}

}  // namespace

Json chat_logprobs(const Tokenizer* tok, const TextOutput& out, size_t begin, size_t end) {
  Json content = Json::array();
  const auto& lps = out.logprobs();
  end = std::min(end, rendered_tokens(out));
  for (size_t i = begin; i < end; ++i) {
    const std::string t = token_text(tok, out.output_ids()[i]);
    Json top = Json::array();
    for (const auto& [id, lp] : lps[i].top) {
      const std::string tt = token_text(tok, id);
      top.push_back({{"token", tt}, {"logprob", finite(lp)}, {"bytes", bytes_of(tt)}});
    }
    content.push_back({{"token", t}, {"logprob", finite(lps[i].chosen)}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

Json completion_logprobs(const Tokenizer* tok, const TextOutput& out, size_t begin, size_t end, size_t offset) {
  Json lists = legacy_lists();
  append_legacy(tok, out.output_ids(), out.logprobs(), begin, std::min(end, rendered_tokens(out)), offset, lists);
  return lists;
}

void add_sglang_logprobs(const Tokenizer* tok, const TextOutput& out, bool with_text, Json& meta) {
  const size_t n = std::min(out.logprobs().size(), out.output_ids().size());
  sglang_lists(tok, std::span(out.output_ids()).first(n), out.logprobs(), with_text, meta["output_token_logprobs"],
               meta["output_top_logprobs"]);
}

void add_sglang_prompt_logprobs(const Tokenizer* tok, const TextOutput& out, std::span<const int32_t> prompt,
                                size_t start, bool with_text, Json& meta) {
  const auto& lps = out.prompt_logprobs();
  const size_t n = start < prompt.size() ? std::min(lps.size(), prompt.size() - start) : 0;
  sglang_lists(tok, prompt.subspan(start, n), lps, with_text, meta["input_token_logprobs"], meta["input_top_logprobs"]);
}

Json echo_completion_logprobs(const Tokenizer* tok, const TextOutput& out, std::span<const int32_t> prompt, size_t end) {
  Json lists = legacy_lists();
  size_t offset = 0;
  const auto& lps = out.prompt_logprobs();
  append_legacy(tok, prompt, lps, 0, std::min(prompt.size(), lps.size()), offset, lists);
  append_legacy(tok, out.output_ids(), out.logprobs(), 0, std::min(end, rendered_tokens(out)), offset, lists);
  return lists;
}

}  // namespace serve8
