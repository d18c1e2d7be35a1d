// `serve8 calibrate`: E4M3 KV scales measured on a text. The text runs through the model in the
// compute dtype (bf16 on the GPU, fp32 on the CPU) in chunks of --context tokens; after each
// layer's kv_store the model hands over the new K (after RoPE) and V, whose absolute maxima are
// kept per layer and KV head. scale = amax / 448 * --margin, per head or per layer (the layer's
// largest head), written as the JSON --quantization-param-path reads, with each head's mean K and
// V row (what int8 and int4 pools centre their rows on).
#include <cmath>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/token_input.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/direct_batch.h"
#include "model/kv_scales.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

namespace {

constexpr float kE4M3Max = 448.0f;

struct CalibrateArgs {
  EngineArgs engine;
  std::string text_file;
  std::string ids_file;
  std::string output;
  std::string granularity = "per-head";
  double margin = 1.0;
  int context = 512;
  int64_t max_tokens = 0;
};

// The whole input as one stream of tokens (an ids file's lines run on), at most --max-tokens.
std::vector<int32_t> read_tokens(const CalibrateArgs& a, const Tokenizer* tok) {
  std::vector<int32_t> ids;
  for (const auto& doc : read_documents("calibrate", a.text_file, a.ids_file, tok, true))
    ids.insert(ids.end(), doc.begin(), doc.end());
  if (a.max_tokens > 0 && static_cast<int64_t>(ids.size()) > a.max_tokens)
    ids.resize(static_cast<size_t>(a.max_tokens));
  SERVE8_CHECK(!ids.empty(), "calibrate: {} gave no tokens", a.text_file.empty() ? a.ids_file : a.text_file);
  return ids;
}

// max |x| of heads [first, first + heads) of x [T, row_heads, D] (host values), folded into
// amax[layer * heads + h], and their sums per channel into sum[(layer * heads + h) * D + c] (for the
// means int8/int4 rows centre on).
void fold_amax(const std::vector<float>& x, int64_t t, int64_t row_heads, int64_t first, int64_t heads, int64_t d,
               int layer, std::vector<float>& amax, std::vector<double>& sum) {
  for (int64_t i = 0; i < t; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      float& m = amax[static_cast<size_t>(layer * heads + h)];
      double* s = sum.data() + (layer * heads + h) * d;
      const float* y = x.data() + (i * row_heads + first + h) * d;
      for (int64_t j = 0; j < d; ++j) {
        m = std::max(m, std::fabs(y[j]));
        s[j] += y[j];
      }
    }
}

// x's values on the host, fp32 (bf16 widened).
std::vector<float> to_host_f32(Backend& be, const Tensor& x) {
  std::vector<float> f(static_cast<size_t>(x.numel()));
  if (x.dtype == DType::kF32) {
    be.copy_to_host(f.data(), x.data, f.size() * sizeof(float));
  } else {
    SERVE8_CHECK(x.dtype == DType::kBF16, "calibrate: K/V in {} are not supported", dtype_name(x.dtype));
    std::vector<uint16_t> b(f.size());
    be.copy_to_host(b.data(), x.data, b.size() * 2);
    for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  }
  return f;
}

int run_calibrate(CalibrateArgs a) {
  SERVE8_CHECK(a.granularity == "per-head" || a.granularity == "per-layer",
               "calibrate: --granularity {}: expected per-head or per-layer", a.granularity);
  SERVE8_CHECK(a.margin >= 1.0 && std::isfinite(a.margin), "calibrate: --margin must be >= 1, got {}", a.margin);
  SERVE8_CHECK(a.context >= 2, "calibrate: --context must be >= 2");
  SERVE8_CHECK(!a.output.empty(), "calibrate: --output is required");
  if (a.engine.model_path.empty()) default_to_builtin_model(a.engine);
  a.engine.kv_cache_dtype = "auto";  // the compute dtype: what the model produces, unquantized
  a.engine.disable_cuda_graph = true;
  EngineParts e = create_engine_parts(a.engine);
  const std::vector<int32_t> ids = read_tokens(a, e.tokenizer.get());
  const ModelConfig& mc = e.model->config();
  const size_t n = static_cast<size_t>(mc.num_layers) * static_cast<size_t>(mc.num_kv_heads);
  std::vector<float> amax_k(n, 0.0f), amax_v(n, 0.0f);
  const size_t d = static_cast<size_t>(mc.head_dim);
  std::vector<double> sum_k(n * d, 0.0), sum_v(n * d, 0.0);
  std::vector<int64_t> rows(static_cast<size_t>(mc.num_layers), 0);
  const int64_t hq = mc.num_heads, hkv = mc.num_kv_heads;
  e.model->set_kv_observer([&](int layer, const Tensor& qkv) {
    const std::vector<float> x = to_host_f32(*e.backend, qkv);
    const int64_t t = qkv.dim(0), row_heads = qkv.dim(1);
    fold_amax(x, t, row_heads, hq, hkv, mc.head_dim, layer, amax_k, sum_k);
    fold_amax(x, t, row_heads, hq + hkv, hkv, mc.head_dim, layer, amax_v, sum_v);
    rows[static_cast<size_t>(layer)] += t;
  });
  std::vector<std::vector<int32_t>> chunks;
  for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(a.context))
    chunks.emplace_back(ids.begin() + static_cast<long>(i),
                        ids.begin() + static_cast<long>(std::min(ids.size(), i + static_cast<size_t>(a.context))));
  // As many chunks per pass as the pool and the batch limits allow.
  const int per_pass = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(e.model->max_seqs()), (e.kv->config().num_slots - 1) / a.context,
                            static_cast<int64_t>(chunks.size())})));
  const std::vector<int32_t> first = first_slots(per_pass, a.context, *e.kv);
  for (size_t c = 0; c < chunks.size(); c += static_cast<size_t>(per_pass)) {
    const size_t m = std::min(chunks.size() - c, static_cast<size_t>(per_pass));
    std::vector<std::vector<int32_t>> group(chunks.begin() + static_cast<long>(c),
                                            chunks.begin() + static_cast<long>(c + m));
    prefill(*e.model, *e.kv, group, std::vector<int32_t>(first.begin(), first.begin() + static_cast<long>(m)),
            e.scheduler.max_prefill_tokens, e.model->max_seqs(), false);
  }
  e.model->set_kv_observer(nullptr);

  KvScales s = KvScales::ones(mc.num_layers, mc.num_kv_heads);
  const bool per_head = a.granularity == "per-head";
  for (int l = 0; l < mc.num_layers; ++l) {
    float lk = 0.0f, lv = 0.0f;
    for (int h = 0; h < mc.num_kv_heads; ++h) {
      lk = std::max(lk, amax_k[static_cast<size_t>(l * mc.num_kv_heads + h)]);
      lv = std::max(lv, amax_v[static_cast<size_t>(l * mc.num_kv_heads + h)]);
    }
    for (int h = 0; h < mc.num_kv_heads; ++h) {
      const size_t i = static_cast<size_t>(l * mc.num_kv_heads + h);
      // A head that never saw a non-zero value keeps a tiny positive scale, never zero.
      s.k[i] = std::max(per_head ? amax_k[i] : lk, 1e-6f) / kE4M3Max * static_cast<float>(a.margin);
      s.v[i] = std::max(per_head ? amax_v[i] : lv, 1e-6f) / kE4M3Max * static_cast<float>(a.margin);
    }
  }
  s.k_mean.resize(n * d);
  s.v_mean.resize(n * d);
  for (size_t i = 0; i < n * d; ++i) {
    const auto count = static_cast<double>(std::max<int64_t>(1, rows[i / d / static_cast<size_t>(mc.num_kv_heads)]));
    s.k_mean[i] = static_cast<float>(sum_k[i] / count);
    s.v_mean[i] = static_cast<float>(sum_v[i] / count);
  }
  const std::string note =
      fmt::format("serve8 calibrate: {} tokens of {} in chunks of {}, {} compute, amax / 448 x {}, {}; K/V means",
                  ids.size(), a.text_file.empty() ? a.ids_file : a.text_file, a.context,
                  dtype_name(e.backend->compute_dtype()), a.margin, a.granularity);
  write_kv_scales_json(a.output, s, mc.num_layers, mc.num_kv_heads, per_head, note);
  const auto [kmin, kmax] = std::minmax_element(s.k.begin(), s.k.end());
  const auto [vmin, vmax] = std::minmax_element(s.v.begin(), s.v.end());
  spdlog::info("calibrate: {} tokens; K scales {:.4g}..{:.4g}, V scales {:.4g}..{:.4g} ({}) -> {}", ids.size(), *kmin,
               *kmax, *vmin, *vmax, a.granularity, a.output);
  return 0;
}

}  // namespace

void register_calibrate(CLI::App& root, SetAction set_action) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* app = root.add_subcommand("calibrate", "measure fp8_e4m3 KV scales (and int8/int4 K/V means) on a text");
  add_engine_options(*app, a->engine);
  app->add_option("--text", a->text_file, "text file (tokenized with the model's tokenizer)");
  app->add_option("--ids-file", a->ids_file, "token ids separated by whitespace (models without a tokenizer)");
  app->add_option("--output", a->output, "scales JSON to write (--quantization-param-path reads it)");
  app->add_option("--granularity", a->granularity, "per-head | per-layer");
  app->add_option("--margin", a->margin, "scale = amax / 448 * margin (>= 1: headroom past the text's maxima)");
  app->add_option("--context", a->context, "tokens per chunk");
  app->add_option("--max-tokens", a->max_tokens, "use at most this many tokens of the text");
  app->callback([a, set_action] { set_action([a] { return run_calibrate(*a); }); });
}

}  // namespace serve8
