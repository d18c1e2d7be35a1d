#include "model/kv_scales.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/safetensors.h"

namespace serve8 {

namespace {

using Json = nlohmann::json;

float checked_scale(const Json& v, const std::string& where) {
  SERVE8_CHECK(v.is_number(), "{} must be a number, got {}", where, v.dump());
  const double s = v.get<double>();
  SERVE8_CHECK(std::isfinite(s) && s > 0.0, "{} must be a positive finite scale, got {}", where, v.dump());
  return static_cast<float>(s);
}

// Fills out[layer * heads + h] from a per-layer object of scalars or per-head arrays.
void read_layer_map(const Json& m, const std::string& where, int layers, int heads, std::vector<float>& out) {
  SERVE8_CHECK(m.is_object(), "{} must be an object of layer -> scale, got {}", where, m.dump().substr(0, 80));
  SERVE8_CHECK(static_cast<int>(m.size()) == layers, "{} has {} layers, the model has {}", where, m.size(), layers);
  for (int l = 0; l < layers; ++l) {
    const std::string key = std::to_string(l);
    SERVE8_CHECK(m.contains(key), "{} has no layer \"{}\"", where, key);
    const Json& v = m.at(key);
    const std::string at = where + "[\"" + key + "\"]";
    if (v.is_array()) {
      SERVE8_CHECK(static_cast<int>(v.size()) == heads, "{} has {} scales, the model has {} KV heads", at, v.size(),
                   heads);
      for (int h = 0; h < heads; ++h)
        out[static_cast<size_t>(l * heads + h)] = checked_scale(v[static_cast<size_t>(h)], at);
    } else {
      const float s = checked_scale(v, at);
      for (int h = 0; h < heads; ++h) out[static_cast<size_t>(l * heads + h)] = s;
    }
  }
}

// Fills out[(layer * heads + h) * head_dim + c] from {"<layer>": [[head_dim values] per head]}.
void read_mean_map(const Json& m, const std::string& where, int layers, int heads, int head_dim,
                   std::vector<float>& out) {
  SERVE8_CHECK(m.is_object() && static_cast<int>(m.size()) == layers,
               "{} must be an object of {} layers -> [[{} values] per KV head]", where, layers, head_dim);
  out.assign(static_cast<size_t>(layers) * static_cast<size_t>(heads) * static_cast<size_t>(head_dim), 0.0f);
  for (int l = 0; l < layers; ++l) {
    const std::string key = std::to_string(l);
    SERVE8_CHECK(m.contains(key) && m[key].is_array() && static_cast<int>(m[key].size()) == heads,
                 "{}[\"{}\"] must hold {} KV heads", where, key, heads);
    for (int h = 0; h < heads; ++h) {
      const Json& row = m[key][static_cast<size_t>(h)];
      SERVE8_CHECK(row.is_array() && static_cast<int>(row.size()) == head_dim, "{}[\"{}\"][{}] must hold {} values",
                   where, key, h, head_dim);
      for (int c = 0; c < head_dim; ++c) {
        const Json& x = row[static_cast<size_t>(c)];
        SERVE8_CHECK(x.is_number() && std::isfinite(x.get<double>()), "{}[\"{}\"][{}][{}] is {}", where, key, h, c,
                     x.dump());
        out[(static_cast<size_t>(l * heads + h)) * static_cast<size_t>(head_dim) + static_cast<size_t>(c)] =
            x.get<float>();
      }
    }
  }
}

}  // namespace

KvScales read_kv_scales_json(const std::string& path, int num_layers, int num_kv_heads, int head_dim) {
  std::ifstream in(path);
  SERVE8_CHECK(in.good(), "--quantization-param-path {}: cannot read the file", path);
  Json j;
  try {
    j = Json::parse(in);
  } catch (const std::exception& e) {
    fail("--quantization-param-path {}: not JSON ({})", path, e.what());
  }
  SERVE8_CHECK(j.is_object() && j.contains("kv_cache") && j["kv_cache"].is_object(),
               "{}: expected an object with a \"kv_cache\" object (SGLang/vLLM KV scale format)", path);
  const Json& kv = j["kv_cache"];
  const std::string dtype = kv.value("dtype", "");
  SERVE8_CHECK(dtype == "float8_e4m3fn" || dtype == "float8_e4m3" || dtype == "fp8_e4m3",
               "{}: kv_cache.dtype is \"{}\", expected \"float8_e4m3fn\"", path, dtype);
  KvScales s = KvScales::ones(num_layers, num_kv_heads);
  if (head_dim > 0 && kv.contains("k_mean") && kv.contains("v_mean")) {
    read_mean_map(kv["k_mean"], path + ": kv_cache.k_mean", num_layers, num_kv_heads, head_dim, s.k_mean);
    read_mean_map(kv["v_mean"], path + ": kv_cache.v_mean", num_layers, num_kv_heads, head_dim, s.v_mean);
  }
  const bool per_tensor = kv.contains("k_scale") || kv.contains("v_scale");
  if (per_tensor) {
    SERVE8_CHECK(kv.contains("k_scale") && kv.contains("v_scale"), "{}: kv_cache has only one of k_scale and v_scale",
                 path);
    read_layer_map(kv["k_scale"], path + ": kv_cache.k_scale", num_layers, num_kv_heads, s.k);
    read_layer_map(kv["v_scale"], path + ": kv_cache.v_scale", num_layers, num_kv_heads, s.v);
    return s;
  }
  SERVE8_CHECK(kv.contains("scaling_factor") && kv["scaling_factor"].is_object(),
               "{}: kv_cache has neither scaling_factor nor k_scale/v_scale", path);
  const Json& sf = kv["scaling_factor"];
  SERVE8_CHECK(sf.contains("0"), "{}: kv_cache.scaling_factor has no tensor-parallel rank \"0\"", path);
  read_layer_map(sf["0"], path + ": kv_cache.scaling_factor[\"0\"]", num_layers, num_kv_heads, s.k);
  s.v = s.k;
  return s;
}

void write_kv_scales_json(const std::string& path, const KvScales& scales, int num_layers, int num_kv_heads,
                          bool per_head, const std::string& note) {
  Json per_layer = Json::object(), k = Json::object(), v = Json::object();
  for (int l = 0; l < num_layers; ++l) {
    float mk = 0.0f, mv = 0.0f;
    Json hk = Json::array(), hv = Json::array();
    for (int h = 0; h < num_kv_heads; ++h) {
      const size_t i = static_cast<size_t>(l * num_kv_heads + h);
      mk = std::max(mk, scales.k[i]);
      mv = std::max(mv, scales.v[i]);
      hk.push_back(scales.k[i]);
      hv.push_back(scales.v[i]);
    }
    const std::string key = std::to_string(l);
    per_layer[key] = std::max(mk, mv);
    k[key] = per_head ? hk : Json(mk);
    v[key] = per_head ? hv : Json(mv);
  }
  Json j = {{"kv_cache",
             {{"dtype", "float8_e4m3fn"}, {"scaling_factor", {{"0", per_layer}}}, {"k_scale", k}, {"v_scale", v}}},
            {"calibration", note}};
  const size_t n = static_cast<size_t>(num_layers) * static_cast<size_t>(num_kv_heads);
  if (!scales.k_mean.empty() && scales.k_mean.size() == scales.v_mean.size() && scales.k_mean.size() % n == 0) {
    const size_t d = scales.k_mean.size() / n;
    for (const auto& [name, src] : {std::pair{"k_mean", &scales.k_mean}, std::pair{"v_mean", &scales.v_mean}}) {
      Json m = Json::object();
      for (int l = 0; l < num_layers; ++l) {
        Json heads = Json::array();
        for (int h = 0; h < num_kv_heads; ++h) {
          const auto at = src->begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(l * num_kv_heads + h) * d);
          heads.push_back(std::vector<float>(at, at + static_cast<std::ptrdiff_t>(d)));
        }
        m[std::to_string(l)] = heads;
      }
      j["kv_cache"][name] = m;
    }
  }
  std::ofstream out(path);
  SERVE8_CHECK(out.good(), "cannot write {}", path);
  out << j.dump(1) << "\n";
}

std::optional<KvScales> read_checkpoint_kv_scales(const std::string& model_path, int num_layers, int num_kv_heads) {
  namespace fs = std::filesystem;
  const fs::path p(model_path);
  const bool has_weights = fs::is_regular_file(p)
                               ? p.extension() == ".safetensors"
                               : fs::exists(p / "model.safetensors") || fs::exists(p / "model.safetensors.index.json");
  if (!has_weights) return std::nullopt;
  const SafetensorsCheckpoint ckpt(model_path);
  KvScales s = KvScales::ones(num_layers, num_kv_heads);
  int found = 0;
  for (int l = 0; l < num_layers; ++l) {
    const std::string base = "model.layers." + std::to_string(l) + ".self_attn.";
    bool layer_found = false;
    for (const auto& [which, out] : {std::pair{'k', &s.k}, std::pair{'v', &s.v}}) {
      const std::string w(1, which);
      for (const std::string& name :
           {base + w + "_scale", base + w + "_proj.output_scale", base + "attn." + w + "_scale"}) {
        if (!ckpt.contains(name)) continue;
        const std::vector<float> vals = ckpt.file_of(name).read_f32(name);
        SERVE8_CHECK(vals.size() == 1 || static_cast<int>(vals.size()) == num_kv_heads,
                     "{}: tensor '{}' has {} values, expected 1 or {} (one per KV head)", model_path, name, vals.size(),
                     num_kv_heads);
        for (int h = 0; h < num_kv_heads; ++h) {
          const float v = vals.size() == 1 ? vals[0] : vals[static_cast<size_t>(h)];
          SERVE8_CHECK(std::isfinite(v) && v > 0.0f, "{}: tensor '{}' holds the scale {}, not a positive one",
                       model_path, name, v);
          (*out)[static_cast<size_t>(l * num_kv_heads + h)] = v;
        }
        layer_found = true;
        break;
      }
    }
    found += layer_found ? 1 : 0;
  }
  if (found == 0) return std::nullopt;
  SERVE8_CHECK(found == num_layers, "{}: KV scale tensors for {} of {} layers; a checkpoint has them for all or none",
               model_path, found, num_layers);
  return s;
}

}  // namespace serve8
