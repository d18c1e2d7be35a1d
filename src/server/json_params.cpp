#include "server/json_params.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

namespace serve8 {

namespace {

std::string type_name(const Json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

int64_t integer_value(const Json& v, const std::string& param) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw_invalid(param, "'{}' is out of range: {}", param, u);
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  // Python clients sometimes send 16.0; accept integral floats in range.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  throw_invalid(param, "'{}' must be an integer, got {}", param, type_name(v));
}

}  // namespace

const Json* field(const Json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

int32_t to_int32(int64_t v, const std::string& param) {
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    throw_invalid(param, "'{}' is out of range: {}", param, v);
  return static_cast<int32_t>(v);
}

void check_absent(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr) return;
  if ((v->is_boolean() && !v->get<bool>()) || (v->is_number() && v->get<double>() == 0.0) ||
      ((v->is_array() || v->is_object()) && v->empty()))
    return;
  throw_invalid(param, "'{}' is not supported by serve8", param);
}

Json parse_json_object(const std::string& body) {
  Json j;
  try {
    j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  } catch (const Json::exception&) {
    // nlohmann 3.11 throws out_of_range.406 for a number beyond double (1e400) even without
    // exceptions: the reparse below turns it into a 400.
    j = Json(Json::value_t::discarded);
  }
  if (j.is_discarded()) {
    // Parse again to get the parser's message (position, and whether it was bad UTF-8).
    try {
      const Json reparsed = Json::parse(body);
      (void)reparsed;
    } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
      throw invalid_request(std::string("The request body is not valid JSON: ") + e.what());
    }
    throw invalid_request("The request body is not valid JSON");
  }
  if (!j.is_object()) throw invalid_request("The request body must be a JSON object, got " + type_name(j));
  return j;
}

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string error_body(const ApiError& e) {
  Json err = {{"message", e.message()}, {"type", e.type()}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param().empty()) err["param"] = e.param();
  if (!e.code().empty()) err["code"] = e.code();
  // SGLang's clients read a top-level "object": "error" too; it costs nothing to include.
  return dump_json(Json{{"object", "error"}, {"error", err}});
}

std::optional<double> read_number(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) throw_invalid(param, "'{}' must be a number, got {}", param, type_name(*v));
  return v->get<double>();
}

std::optional<int64_t> read_integer(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  return integer_value(*v, param);
}

std::optional<bool> read_bool(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) throw_invalid(param, "'{}' must be a boolean, got {}", param, type_name(*v));
  return v->get<bool>();
}

std::optional<std::string> read_string(const Json& obj, const char* key, const std::string& param) {
  const Json* v = field(obj, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) throw_invalid(param, "'{}' must be a string, got {}", param, type_name(*v));
  return v->get<std::string>();
}

std::vector<std::string> read_stop(const Json& value, const std::string& param) {
  std::vector<std::string> out;
  if (value.is_null()) return out;
  if (value.is_string()) {
    out.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    for (const Json& s : value) {
      if (!s.is_string()) throw_invalid(param, "'{}' must be a string or a list of strings", param);
      out.push_back(s.get<std::string>());
    }
  } else {
    throw_invalid(param, "'{}' must be a string or a list of strings, got {}", param, type_name(value));
  }
  for (const std::string& s : out)
    if (s.empty()) throw_invalid(param, "'{}' must not contain empty strings", param);
  return out;
}

bool is_token_list(const Json& value) { return value.is_array() && !value.empty() && value.front().is_number(); }

std::vector<int32_t> read_token_ids(const Json& value, const std::string& param) {
  if (!value.is_array()) throw_invalid(param, "'{}' must be a list of token ids, got {}", param, type_name(value));
  std::vector<int32_t> ids;
  ids.reserve(value.size());
  for (const Json& v : value) ids.push_back(to_int32(integer_value(v, param), param));
  return ids;
}

namespace {

// {"token id": bias, ...}, as OpenAI sends it (keys are strings of ids).
std::vector<std::pair<int32_t, float>> read_logit_bias(const Json& value, const std::string& param) {
  std::vector<std::pair<int32_t, float>> out;
  if (value.is_null()) return out;
  if (!value.is_object())
    throw_invalid(param, "'{}' must map token ids to biases, got {}", param, type_name(value));
  for (auto it = value.begin(); it != value.end(); ++it) {
    int64_t id = 0;
    const std::string& key = it.key();
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size())
      throw_invalid(param, "'{}' keys must be token ids, got '{}'", param, key);
    if (!it->is_number()) throw_invalid(param, "'{}' values must be numbers, got {}", param, type_name(*it));
    out.emplace_back(to_int32(id, param), it->get<float>());
  }
  return out;
}

// The penalties, min_new_tokens (under `min_key`) and logit_bias of an object: SGLang's
// sampling_params or an OpenAI body. `path` names a key for errors.
void read_penalties(const Json& obj, const char* min_key, const std::function<std::string(const char*)>& path,
                    SamplingParams& p) {
  if (auto v = read_number(obj, "frequency_penalty", path("frequency_penalty")))
    p.frequency_penalty = static_cast<float>(*v);
  if (auto v = read_number(obj, "presence_penalty", path("presence_penalty"))) p.presence_penalty = static_cast<float>(*v);
  if (auto v = read_number(obj, "repetition_penalty", path("repetition_penalty")))
    p.repetition_penalty = static_cast<float>(*v);
  if (auto v = read_integer(obj, min_key, path(min_key))) p.min_new_tokens = to_int32(*v, path(min_key));
  if (const Json* v = field(obj, "logit_bias")) p.logit_bias = read_logit_bias(*v, path("logit_bias"));
}

// A schema or structural tag given as a JSON object or as its text.
std::string json_text(const Json& v, const std::string& param) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) return dump_json(v);
  throw_invalid(param, "'{}' must be a JSON object or its text, got {}", param, type_name(v));
}

// The one grammar among `keys` of obj (SGLang's regex / json_schema / ebnf / structural_tag).
void read_grammar_keys(const Json& obj, const std::string& prefix, SamplingParams& p) {
  using Kind = GrammarSpec::Kind;
  static const std::pair<const char*, Kind> kKeys[] = {
      {"regex", Kind::kRegex}, {"json_schema", Kind::kJsonSchema}, {"ebnf", Kind::kEbnf}, {"structural_tag", Kind::kStructuralTag}};
  for (const auto& key_kind : kKeys) {
    const Json* v = field(obj, key_kind.first);
    if (v == nullptr) continue;
    const std::string param = prefix + key_kind.first;
    if (!p.grammar.empty())
      throw_invalid(param, "Only one of regex, json_schema, ebnf, structural_tag and response_format may be given");
    p.grammar.kind = key_kind.second;
    p.grammar.source = param;
    if (key_kind.second == Kind::kRegex || key_kind.second == Kind::kEbnf) {
      if (!v->is_string()) throw_invalid(param, "'{}' must be a string, got {}", param, type_name(*v));
      p.grammar.text = v->get<std::string>();
    } else {
      p.grammar.text = json_text(*v, param);
    }
  }
}

}  // namespace

// OpenAI's response_format: text, json_object, json_schema ({name, schema, strict}) and SGLang's
// structural_tag (the xgrammar form with "format", or the older structures + triggers).
void read_response_format(const Json& rf, SamplingParams& p) {
  using Kind = GrammarSpec::Kind;
  const auto type = rf.is_object() ? rf.find("type") : rf.end();
  if (!rf.is_object() || type == rf.end() || !type->is_string())
    throw_invalid("response_format", "'response_format' must be an object with a 'type'");
  const std::string t = type->get<std::string>();
  if (t == "text") return;
  if (!p.grammar.empty())
    throw_invalid("response_format", "Only one of regex, ebnf and response_format may be given");
  p.grammar.source = "response_format";
  if (t == "json_object") {
    p.grammar.kind = Kind::kJsonObject;
  } else if (t == "json_schema") {
    const Json* js = field(rf, "json_schema");
    if (js == nullptr || !js->is_object())
      throw_invalid("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
    const Json* schema = field(*js, "schema");
    p.grammar.kind = Kind::kJsonSchema;
    // No schema: any JSON object, as OpenAI's json_schema without one.
    p.grammar.text = schema ? json_text(*schema, "response_format.json_schema.schema") : R"({"type": "object"})";
  } else if (t == "structural_tag") {
    p.grammar.kind = Kind::kStructuralTag;
    if (field(rf, "format") != nullptr) {
      p.grammar.text = dump_json(rf);
    } else {
      const Json* structures = field(rf, "structures");
      const Json* triggers = field(rf, "triggers");
      if (structures == nullptr || !structures->is_array() || triggers == nullptr || !triggers->is_array())
        throw_invalid("response_format", "A structural_tag response_format needs 'format', or 'structures' and 'triggers'");
      Json tags = Json::array();
      for (const Json& s : *structures) {
        if (!s.is_object() || !s.contains("begin") || !s.contains("end"))
          throw_invalid("response_format.structures", "Each structure needs 'begin', 'schema' and 'end'");
        tags.push_back({{"type", "tag"},
                        {"begin", s["begin"]},
                        {"content", {{"type", "json_schema"}, {"json_schema", s.value("schema", Json::object())}}},
                        {"end", s["end"]}});
      }
      p.grammar.text = dump_json(Json{{"type", "structural_tag"},
                                      {"format", {{"type", "triggered_tags"}, {"triggers", *triggers}, {"tags", tags}}}});
    }
  } else {
    throw_invalid("response_format.type",
                  "'response_format.type' must be text, json_object, json_schema or structural_tag, got '{}'", t);
  }
}

void parse_sglang_sampling_params(const Json& sp, const std::string& param, SamplingParams& p,
                                  bool& max_new_tokens_given) {
  if (sp.is_null()) return;
  if (!sp.is_object()) throw_invalid(param, "'{}' must be an object, got {}", param, type_name(sp));
  static const char* const kKnown[] = {"temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "max_new_tokens",
                                       "stop",
                                       "stop_token_ids",
                                       "ignore_eos",
                                       "skip_special_tokens",
                                       "seed",
                                       "sampling_seed",
                                       "frequency_penalty",
                                       "presence_penalty",
                                       "repetition_penalty",
                                       "min_new_tokens",
                                       "n",
                                       "no_stop_trim",
                                       "spaces_between_special_tokens",
                                       "regex",
                                       "json_schema",
                                       "ebnf",
                                       "structural_tag",
                                       "custom_params",
                                       "stream_interval",
                                       "logit_bias"};
  for (auto it = sp.begin(); it != sp.end(); ++it) {
    if (std::find(std::begin(kKnown), std::end(kKnown), it.key()) == std::end(kKnown))
      throw_invalid(param + "." + it.key(), "Unknown sampling parameter '{}'", it.key());
  }
  auto path = [&](const char* key) { return param + "." + key; };
  if (auto v = read_number(sp, "temperature", path("temperature"))) p.temperature = static_cast<float>(*v);
  if (auto v = read_number(sp, "top_p", path("top_p"))) p.top_p = static_cast<float>(*v);
  if (auto v = read_integer(sp, "top_k", path("top_k"))) p.top_k = to_int32(*v, path("top_k"));
  if (auto v = read_number(sp, "min_p", path("min_p"))) p.min_p = static_cast<float>(*v);
  if (auto v = read_integer(sp, "max_new_tokens", path("max_new_tokens"))) {
    p.max_new_tokens = to_int32(*v, path("max_new_tokens"));
    max_new_tokens_given = true;
  }
  if (sp.contains("stop")) p.stop = read_stop(sp["stop"], path("stop"));
  if (const Json* v = field(sp, "stop_token_ids")) {
    for (int32_t id : read_token_ids(*v, path("stop_token_ids"))) p.stop_token_ids.push_back(id);
  }
  if (auto v = read_bool(sp, "ignore_eos", path("ignore_eos"))) p.ignore_eos = *v;
  if (auto v = read_bool(sp, "skip_special_tokens", path("skip_special_tokens"))) p.skip_special_tokens = *v;
  for (const char* key : {"seed", "sampling_seed"})
    if (auto v = read_integer(sp, key, path(key))) p.seed = static_cast<uint64_t>(*v);
  read_penalties(sp, "min_new_tokens", [&](const char* key) { return path(key); }, p);
  if (auto v = read_bool(sp, "no_stop_trim", path("no_stop_trim")); v && *v)
    throw_invalid(path("no_stop_trim"), "'no_stop_trim' is not supported by serve8");
  read_grammar_keys(sp, param + ".", p);
}

void parse_openai_sampling_params(const Json& body, bool chat, SamplingParams& p, bool& max_tokens_given) {
  // OpenAI's defaults: 16 tokens for completions, as many as the context allows for chat.
  p.max_new_tokens = chat ? std::numeric_limits<int32_t>::max() : 16;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (auto v = read_integer(body, key, key)) {
      p.max_new_tokens = to_int32(*v, key);
      max_tokens_given = true;
    }
  }
  if (auto v = read_number(body, "temperature", "temperature")) {
    // OpenAI's range is [0, 2]; SGLang's /generate has no upper bound and keeps none here.
    if (*v > 2.0) throw_invalid("temperature", "'temperature' must be between 0 and 2, got {}", *v);
    p.temperature = static_cast<float>(*v);
  }
  if (auto v = read_number(body, "top_p", "top_p")) p.top_p = static_cast<float>(*v);
  if (auto v = read_integer(body, "top_k", "top_k")) p.top_k = to_int32(*v, "top_k");
  if (auto v = read_number(body, "min_p", "min_p")) p.min_p = static_cast<float>(*v);
  if (auto v = read_integer(body, "seed", "seed")) p.seed = static_cast<uint64_t>(*v);
  if (body.contains("stop")) p.stop = read_stop(body["stop"], "stop");
  if (const Json* v = field(body, "stop_token_ids")) p.stop_token_ids = read_token_ids(*v, "stop_token_ids");
  if (auto v = read_bool(body, "ignore_eos", "ignore_eos")) p.ignore_eos = *v;
  if (auto v = read_bool(body, "skip_special_tokens", "skip_special_tokens")) p.skip_special_tokens = *v;
  if (chat) {
    const bool want = read_bool(body, "logprobs", "logprobs").value_or(false);
    const std::optional<int64_t> top = read_integer(body, "top_logprobs", "top_logprobs");
    if (top && !want) throw_invalid("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    if (top && (*top < 0 || *top > kMaxTopLogprobs))
      throw_invalid("top_logprobs", "'top_logprobs' must be between 0 and {}, got {}", kMaxTopLogprobs, *top);
    if (want) p.logprobs = static_cast<int>(top.value_or(0));
  } else {
    if (const std::optional<int64_t> n = read_integer(body, "logprobs", "logprobs")) {
      if (*n < 0 || *n > kMaxTopLogprobs)
        throw_invalid("logprobs", "'logprobs' must be between 0 and {}, got {}", kMaxTopLogprobs, *n);
      p.logprobs = static_cast<int>(*n);
    }
    check_absent(body, "top_logprobs", "top_logprobs");
  }
  // min_tokens is vLLM's name for it in OpenAI bodies; repetition_penalty an extension of both.
  read_penalties(body, "min_tokens", [](const char* key) { return std::string(key); }, p);
  // Completions echo the prompt (with logprobs, its tokens' too); chat has no echo in OpenAI's API.
  if (auto v = read_bool(body, "echo", "echo"); v && *v && chat) throw_invalid("echo", "'echo' is a completions parameter");
  if (!chat && field(body, "suffix") != nullptr) throw_invalid("suffix", "'suffix' is not supported by serve8");
  // SGLang's extensions of OpenAI's bodies: regex and ebnf beside response_format.
  for (const char* key : {"regex", "ebnf"}) {
    if (const Json* v = field(body, key)) {
      if (!v->is_string()) throw_invalid(key, "'{}' must be a string, got {}", key, type_name(*v));
      if (!p.grammar.empty()) throw_invalid(key, "Only one of regex, ebnf and response_format may be given");
      p.grammar = GrammarSpec{std::string(key) == "regex" ? GrammarSpec::Kind::kRegex : GrammarSpec::Kind::kEbnf,
                              v->get<std::string>(), key};
    }
  }
  if (const Json* rf = field(body, "response_format")) read_response_format(*rf, p);
}

int read_openai_n(const Json& body) {
  const int64_t n = read_integer(body, "n", "n").value_or(1);
  if (n < 1 || n > kMaxChoices) throw_invalid("n", "'n' must be between 1 and {}, got {}", kMaxChoices, n);
  return static_cast<int>(n);
}

}  // namespace serve8
