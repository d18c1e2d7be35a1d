#include "server/logprobs_json.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

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
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  const auto& lps = out.logprobs();
  end = std::min(end, rendered_tokens(out));
  for (size_t i = 0; i < end; ++i) {
    const std::string t = token_text(tok, out.output_ids()[i]);
    if (i >= begin) {
      tokens.push_back(t);
      token_lps.push_back(finite(lps[i].chosen));
      Json top = Json::object();
      for (const auto& [id, lp] : lps[i].top) top[token_text(tok, id)] = finite(lp);
      tops.push_back(top);
      offsets.push_back(offset);
    }
    offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

void add_sglang_logprobs(const Tokenizer* tok, const TextOutput& out, bool with_text, Json& meta) {
  Json chosen = Json::array(), tops = Json::array();
  const auto& lps = out.logprobs();
  const size_t n = std::min(lps.size(), out.output_ids().size());
  const auto text = [&](int32_t id) { return with_text ? Json(token_text(tok, id)) : Json(nullptr); };
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = out.output_ids()[i];
    chosen.push_back(Json::array({finite(lps[i].chosen), id, text(id)}));
    Json top = Json::array();
    for (const auto& [t, lp] : lps[i].top) top.push_back(Json::array({finite(lp), t, text(t)}));
    tops.push_back(top);
  }
  meta["output_token_logprobs"] = chosen;
  meta["output_top_logprobs"] = tops;
}

void add_sglang_prompt_logprobs(const Tokenizer* tok, const TextOutput& out, std::span<const int32_t> prompt,
                                size_t start, bool with_text, Json& meta) {
  Json chosen = Json::array(), tops = Json::array();
  const auto& lps = out.prompt_logprobs();
  const auto text = [&](int32_t id) { return with_text ? Json(token_text(tok, id)) : Json(nullptr); };
  for (size_t i = 0; i < lps.size() && start + i < prompt.size(); ++i) {
    const int32_t id = prompt[start + i];
    chosen.push_back(Json::array({finite(lps[i].chosen), id, text(id)}));
    Json top = Json::array();
    for (const auto& [t, lp] : lps[i].top) top.push_back(Json::array({finite(lp), t, text(t)}));
    tops.push_back(std::isnan(lps[i].chosen) ? Json(nullptr) : top);
  }
  meta["input_token_logprobs"] = chosen;
  meta["input_top_logprobs"] = tops;
}

Json echo_completion_logprobs(const Tokenizer* tok, const TextOutput& out, std::span<const int32_t> prompt, size_t end) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(), offsets = Json::array();
  size_t offset = 0;
  const auto& lps = out.prompt_logprobs();
  for (size_t i = 0; i < prompt.size() && i < lps.size(); ++i) {
    const std::string t = token_text(tok, prompt[i]);
    tokens.push_back(t);
    token_lps.push_back(finite(lps[i].chosen));
    Json top = Json::object();
    for (const auto& [id, lp] : lps[i].top) top[token_text(tok, id)] = finite(lp);
    tops.push_back(std::isnan(lps[i].chosen) ? Json(nullptr) : top);
    offsets.push_back(offset);
    offset += t.size();
  }
  Json all = {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  const Json rest = completion_logprobs(tok, out, 0, end, offset);
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const Json& v : rest[key]) all[key].push_back(v);
  return all;
}

}  // namespace serve8
