// Reading and writing HF config.json for the Llama family; JSON stays inside this file.
#include "model/config.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "model/quant_config.h"

namespace serve8 {
namespace {

using Json = nlohmann::json;

// Reads one field, with the file and field named in every error.
class FieldReader {
 public:
  FieldReader(const Json& j, const std::string& origin) : j_(j), origin_(origin) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  int64_t integer(const char* key) const {
    SERVE8_CHECK(has(key), "{}: field '{}' is missing", origin_, key);
    return integer_value(j_.at(key), key);
  }
  int64_t integer_or(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  double number(const char* key) const {
    SERVE8_CHECK(has(key), "{}: field '{}' is missing", origin_, key);
    const Json& v = j_.at(key);
    SERVE8_CHECK(v.is_number(), "{}: field '{}' must be a number, got {}", origin_, key, v.dump());
    return v.get<double>();
  }
  double number_or(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    SERVE8_CHECK(v.is_boolean(), "{}: field '{}' must be true or false, got {}", origin_, key, v.dump());
    return v.get<bool>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    SERVE8_CHECK(v.is_string(), "{}: field '{}' must be a string, got {}", origin_, key, v.dump());
    return v.get<std::string>();
  }

  int64_t integer_value(const Json& v, const std::string& key) const {
    // Some exporters write 4096.0; accept integral floats, nothing else.
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
    }
    fail("{}: field '{}' must be an integer, got {}", origin_, key, v.dump());
  }

 private:
  const Json& j_;
  const std::string& origin_;
};

int to_int(int64_t v, const std::string& origin, const char* key) {
  SERVE8_CHECK(v >= INT32_MIN && v <= INT32_MAX, "{}: field '{}' = {} does not fit in 32 bits", origin, key, v);
  return static_cast<int>(v);
}

DType parse_torch_dtype(const std::string& s, const std::string& origin, const char* key) {
  if (s == "float32" || s == "float") return DType::kF32;
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  fail("{}: field '{}' = \"{}\" is not a dtype serve8 loads (float32, bfloat16, float16)", origin, key, s);
}

std::string torch_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      break;
  }
  fail("config.json: a model's dtype cannot be {}", dtype_name(t));
}

RopeScaling parse_rope_scaling(const Json& j, const std::string& origin) {
  SERVE8_CHECK(j.is_object(), "{}: field 'rope_scaling' must be null or an object, got {}", origin, j.dump());
  const FieldReader f(j, origin);
  // Newer transformers write rope_type, older ones type.
  std::string type = f.string_or("rope_type", f.string_or("type", ""));
  RopeScaling rs;
  if (type.empty() || type == "default") return rs;
  SERVE8_CHECK(type == "llama3", "{}: rope_scaling type '{}' is not supported (serve8 knows llama3)", origin, type);
  rs.type = type;
  rs.factor = static_cast<float>(f.number("factor"));
  rs.low_freq_factor = static_cast<float>(f.number_or("low_freq_factor", rs.low_freq_factor));
  rs.high_freq_factor = static_cast<float>(f.number_or("high_freq_factor", rs.high_freq_factor));
  rs.original_max_position_embeddings =
      to_int(f.integer_or("original_max_position_embeddings", rs.original_max_position_embeddings), origin,
             "rope_scaling.original_max_position_embeddings");
  SERVE8_CHECK(rs.factor > 0.0f, "{}: rope_scaling.factor must be positive, got {}", origin, rs.factor);
  SERVE8_CHECK(rs.low_freq_factor > 0.0f && rs.high_freq_factor > rs.low_freq_factor,
               "{}: rope_scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}", origin,
               rs.low_freq_factor, rs.high_freq_factor);
  SERVE8_CHECK(rs.original_max_position_embeddings > 0,
               "{}: rope_scaling.original_max_position_embeddings must be positive", origin);
  return rs;
}

void validate(const ModelConfig& c, const std::string& origin) {
  auto positive = [&](int v, const char* key) {
    SERVE8_CHECK(v > 0, "{}: field '{}' must be positive, got {}", origin, key, v);
  };
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_layers, "num_hidden_layers");
  positive(c.num_heads, "num_attention_heads");
  positive(c.num_kv_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  positive(c.vocab_size, "vocab_size");
  positive(c.max_position_embeddings, "max_position_embeddings");
  SERVE8_CHECK(c.num_heads % c.num_kv_heads == 0,
               "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", origin, c.num_heads,
               c.num_kv_heads);
  SERVE8_CHECK(c.head_dim % 2 == 0, "{}: head_dim ({}) must be even for RoPE", origin, c.head_dim);
  SERVE8_CHECK(c.rms_norm_eps > 0.0f, "{}: field 'rms_norm_eps' must be positive, got {}", origin, c.rms_norm_eps);
  SERVE8_CHECK(c.rope_theta > 0.0f, "{}: field 'rope_theta' must be positive, got {}", origin, c.rope_theta);
  SERVE8_CHECK(c.bos_token_id < c.vocab_size, "{}: bos_token_id {} is outside the vocabulary of {}", origin,
               c.bos_token_id, c.vocab_size);
  for (int id : c.eos_token_ids)
    SERVE8_CHECK(id >= 0 && id < c.vocab_size, "{}: eos_token_id {} is outside the vocabulary of {}", origin, id,
                 c.vocab_size);
}

// The shortest decimal that reads back as this float, so 1e-5f is written as 1e-05 and not as
// the double 9.999999747378752e-06 it widens to.
double shortest_double(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::stod(std::string(buf, r.ptr));
}

std::string model_type_of(const std::string& architecture) {
  if (architecture == "MistralForCausalLM") return "mistral";
  if (architecture == "Qwen2ForCausalLM") return "qwen2";
  return "llama";
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    fail("{}: not valid JSON: {}", origin, e.what());
  }
  SERVE8_CHECK(j.is_object(), "{}: expected a JSON object at the top level", origin);
  const FieldReader f(j, origin);

  ModelConfig c;
  SERVE8_CHECK(f.has("architectures"), "{}: field 'architectures' is missing", origin);
  const Json& arch = j.at("architectures");
  SERVE8_CHECK(arch.is_array() && !arch.empty() && arch[0].is_string(),
               "{}: field 'architectures' must be a non-empty list of names, got {}", origin, arch.dump());
  c.architecture = arch[0].get<std::string>();
  SERVE8_CHECK(c.architecture == "LlamaForCausalLM" || c.architecture == "MistralForCausalLM" ||
                   c.architecture == "Qwen2ForCausalLM",
               "{}: architecture '{}' is not supported (serve8 runs LlamaForCausalLM, MistralForCausalLM and "
               "Qwen2ForCausalLM)",
               origin, c.architecture);

  c.hidden_size = to_int(f.integer("hidden_size"), origin, "hidden_size");
  c.intermediate_size = to_int(f.integer("intermediate_size"), origin, "intermediate_size");
  c.num_layers = to_int(f.integer("num_hidden_layers"), origin, "num_hidden_layers");
  c.num_heads = to_int(f.integer("num_attention_heads"), origin, "num_attention_heads");
  c.num_kv_heads = to_int(f.integer_or("num_key_value_heads", c.num_heads), origin, "num_key_value_heads");
  if (f.has("head_dim")) {
    c.head_dim = to_int(f.integer("head_dim"), origin, "head_dim");
  } else {
    SERVE8_CHECK(c.num_heads > 0 && c.hidden_size % c.num_heads == 0,
                 "{}: hidden_size ({}) must be a multiple of num_attention_heads ({}) when head_dim is absent", origin,
                 c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.vocab_size = to_int(f.integer("vocab_size"), origin, "vocab_size");
  c.max_position_embeddings = to_int(f.integer("max_position_embeddings"), origin, "max_position_embeddings");
  c.rms_norm_eps = static_cast<float>(f.number_or("rms_norm_eps", c.rms_norm_eps));
  c.rope_theta = static_cast<float>(f.number_or("rope_theta", c.rope_theta));
  if (f.has("rope_scaling")) c.rope_scaling = parse_rope_scaling(j.at("rope_scaling"), origin);
  // transformers >= 5 writes theta and scaling together as rope_parameters.
  if (f.has("rope_parameters")) {
    const Json& rp = j.at("rope_parameters");
    SERVE8_CHECK(rp.is_object(), "{}: field 'rope_parameters' must be an object, got {}", origin, rp.dump());
    c.rope_theta = static_cast<float>(FieldReader(rp, origin).number_or("rope_theta", c.rope_theta));
    c.rope_scaling = parse_rope_scaling(rp, origin);
  }
  c.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  // Qwen2's attention always has q/k/v biases; its config says nothing about them.
  c.attention_bias = c.architecture == "Qwen2ForCausalLM" || f.boolean_or("attention_bias", false);
  c.bos_token_id = to_int(f.integer_or("bos_token_id", c.bos_token_id), origin, "bos_token_id");
  if (f.has("eos_token_id")) {
    const Json& eos = j.at("eos_token_id");
    if (eos.is_array()) {
      for (const Json& e : eos)
        c.eos_token_ids.push_back(to_int(f.integer_value(e, "eos_token_id"), origin, "eos_token_id"));
    } else {
      c.eos_token_ids.push_back(to_int(f.integer("eos_token_id"), origin, "eos_token_id"));
    }
  }
  // transformers >= 4.56 writes "dtype"; older versions "torch_dtype".
  const char* dtype_key = f.has("torch_dtype") ? "torch_dtype" : "dtype";
  if (f.has(dtype_key)) c.torch_dtype = parse_torch_dtype(f.string_or(dtype_key, ""), origin, dtype_key);

  if (f.has("quantization_config")) c.fp8_checkpoint = parse_quantization_config(j.at("quantization_config"), origin);
  validate(c, origin);

  if (f.has("sliding_window") && f.boolean_or("use_sliding_window", true)) {
    const int64_t window = f.integer("sliding_window");
    if (window > 0 && window < c.max_position_embeddings)
      spdlog::warn(
          "{}: sliding_window {} is ignored; serve8 attends to the full context, so outputs past {} tokens "
          "differ from a sliding-window implementation",
          origin, window, window);
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (fs::is_directory(p)) p /= "config.json";
  std::ifstream in(p, std::ios::binary);
  SERVE8_CHECK(in.good(), "{}: cannot open the model config", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  ModelConfig c = parse_model_config(ss.str(), p.string());
  // ModelOpt's exports describe their quantization beside config.json.
  const fs::path modelopt = p.parent_path() / "hf_quant_config.json";
  if (c.fp8_checkpoint.method.empty() && fs::is_regular_file(modelopt)) {
    std::ifstream q(modelopt, std::ios::binary);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(q);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not valid JSON: {}", modelopt.string(), e.what());
    }
    c.fp8_checkpoint = parse_quantization_config(j, modelopt.string());
  }
  return c;
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  const int half = head_dim / 2;
  std::vector<float> out(static_cast<size_t>(half));
  const RopeScaling& rs = rope_scaling;
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(rope_theta), -2.0 * i / head_dim);
    if (rs.type == "llama3") {
      // transformers' _compute_llama3_parameters: long wavelengths are slowed down by `factor`,
      // short ones kept, and the band between blended linearly in context-length / wavelength.
      const double old_ctx = rs.original_max_position_embeddings;
      const double low_wavelen = old_ctx / rs.low_freq_factor;
      const double high_wavelen = old_ctx / rs.high_freq_factor;
      const double wavelen = 2.0 * pi / f;
      if (wavelen > low_wavelen) {
        f /= rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, qkv = q_size() + 2 * kv_size();
  int64_t per_layer = 2 * h + qkv * h + static_cast<int64_t>(q_size()) * h + 3 * h * intermediate_size;
  if (attention_bias) per_layer += qkv;
  const int64_t embed = static_cast<int64_t>(vocab_size) * h;
  return embed + num_layers * per_layer + h + (tie_word_embeddings ? 0 : embed);
}

std::string model_config_to_json(const ModelConfig& c) {
  Json j;
  j["architectures"] = Json::array({c.architecture});
  j["model_type"] = model_type_of(c.architecture);
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = shortest_double(c.rms_norm_eps);
  j["rope_theta"] = shortest_double(c.rope_theta);
  if (c.rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    j["rope_scaling"] = {{"rope_type", c.rope_scaling.type},
                         {"factor", shortest_double(c.rope_scaling.factor)},
                         {"low_freq_factor", shortest_double(c.rope_scaling.low_freq_factor)},
                         {"high_freq_factor", shortest_double(c.rope_scaling.high_freq_factor)},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  // Qwen2 has no attention_bias field (its biases are implied); Llama and Mistral read it.
  if (c.architecture != "Qwen2ForCausalLM") j["attention_bias"] = c.attention_bias;
  j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (c.eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else {
    j["eos_token_id"] = c.eos_token_ids;
  }
  j["torch_dtype"] = torch_dtype_name(c.torch_dtype);
  return j.dump(2) + "\n";
}

}  // namespace serve8
