// Request JSON to native types: typed field readers that name the offending field, SGLang's
// `sampling_params` and OpenAI's sampling fields into SamplingParams, prompts into token ids, and
// the error/response helpers every route uses. Only server/ sees JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampling_params.h"
#include "server/api_error.h"

namespace serve8 {

// Ordered: objects keep the request's key order (a JSON schema's properties are generated in it).
using Json = nlohmann::ordered_json;

// Parses a request body; malformed JSON (invalid UTF-8 included) and non-objects are a 400.
Json parse_json_object(const std::string& body);
// Serializes for the wire; invalid UTF-8 (never expected) becomes U+FFFD instead of throwing.
std::string dump_json(const Json& j);
// OpenAI's error body for `e`.
std::string error_body(const ApiError& e);

// Field readers: a missing key or a null is "not given"; a value of the wrong type is a 400 that
// names `param` (the field's path, e.g. "sampling_params.temperature").
std::optional<double> read_number(const Json& obj, const char* key, const std::string& param);
std::optional<int64_t> read_integer(const Json& obj, const char* key, const std::string& param);
std::optional<bool> read_bool(const Json& obj, const char* key, const std::string& param);
std::optional<std::string> read_string(const Json& obj, const char* key, const std::string& param);

// obj[key] unless missing or null.
const Json* field(const Json& obj, const char* key);
int32_t to_int32(int64_t v, const std::string& param);  // a 400 naming param when out of range
// A field serve8 does not implement: a 400 unless missing, null, false, 0 or empty.
void check_absent(const Json& obj, const char* key, const std::string& param);

// A string or a list of strings.
std::vector<std::string> read_stop(const Json& value, const std::string& param);
// A list of token ids (integers; their range is checked later, against the vocabulary).
std::vector<int32_t> read_token_ids(const Json& value, const std::string& param);
// True when `value` is a non-empty list of integers (one tokenized prompt).
bool is_token_list(const Json& value);

// SGLang's sampling_params object. Unknown keys are a 400 (a misspelled parameter must not be
// silently ignored); parameters serve8 does not implement are accepted at their neutral value.
// "n" is the caller's (handle_generate fans the prompt out).
void parse_sglang_sampling_params(const Json& sp, const std::string& param, SamplingParams& out,
                                  bool& max_new_tokens_given);
// The sampling fields of an OpenAI completions or chat body, with SGLang/vLLM's extensions
// (top_k, min_p, ignore_eos, stop_token_ids, skip_special_tokens, repetition_penalty, min_tokens).
// response_format (json_object, json_schema, structural_tag) and SGLang's regex / ebnf set
// out.grammar. What serve8 does not implement (prompt log probabilities, suffix) is a 400.
void parse_openai_sampling_params(const Json& body, bool chat, SamplingParams& out, bool& max_tokens_given);
// OpenAI's response_format object (text, json_object, json_schema, structural_tag) into p.grammar.
void read_response_format(const Json& rf, SamplingParams& p);
// OpenAI's "n": choices per prompt, 1 to kMaxChoices (OpenAI's own limit).
constexpr int kMaxChoices = 128;
int read_openai_n(const Json& body);

}  // namespace serve8
