// `serve8 convert fp8`: a checkpoint to an FP8 one (compressed-tensors: e4m3 weights with one scale
// per output channel, inputs quantized per token at run time, or kept unquantized with
// --activations none) that serve8, vLLM and SGLang load as it is. With --method gptq (the default)
// each matrix is rounded GPTQ's way (model/gptq.h) from its inputs' second moments over calibration
// text, which loading with --quantization fp8 (each weight rounded alone) cannot do.
#include <cblas.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/token_input.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/direct_batch.h"
#include "engine/engine.h"
#include "formats/safetensors.h"
#include "model/builtin_models.h"
#include "model/gptq.h"
#include "model/weights.h"

namespace serve8 {

namespace {

struct ConvertFp8Args {
  EngineArgs engine;
  std::string output, calibration, calibration_ids, method = "gptq", activations = "token";
  int calibration_tokens = 16384, context = 512;
  double damp = 0.01;
};

std::vector<float> host_f32(const Tensor& t) {
  SERVE8_CHECK(t.dtype == DType::kF32, "convert fp8: {} weights; the CPU backend's are fp32", dtype_name(t.dtype));
  return std::vector<float>(t.ptr<const float>(), t.ptr<const float>() + t.numel());
}

int run_convert_fp8(ConvertFp8Args a) {
  SERVE8_CHECK(a.method == "gptq" || a.method == "rtn", "convert fp8: --method is gptq or rtn, not {}", a.method);
  SERVE8_CHECK(a.activations == "token" || a.activations == "none",
               "convert fp8: --activations is token or none, not {}", a.activations);
  SERVE8_CHECK(a.method == "rtn" || a.calibration.empty() != a.calibration_ids.empty(),
               "convert fp8: --method gptq needs one of --calibration TEXT and --calibration-ids FILE");
  SERVE8_CHECK(a.context >= 2 && a.calibration_tokens >= a.context,
               "convert fp8: --calibration-tokens {} must hold one --context {} chunk", a.calibration_tokens,
               a.context);
  a.engine.device = "cpu";
  a.engine.scheduler.disable_radix_cache = true;
  constexpr int kBatch = 8;
  a.engine.max_total_tokens = int64_t{kBatch} * a.context + 1;
  a.engine.scheduler.max_running_requests = std::max(a.engine.scheduler.max_running_requests, kBatch);
  EngineParts e = create_engine_parts(a.engine);
  const ModelConfig& c = e.model->config();
  SERVE8_CHECK(!e.model->weights().layers.empty() && !e.model->weights().layers[0].any_fp8(),
               "convert fp8: {} already holds FP8 weights", a.engine.model_path);

  // H = sum of x x^T per (layer, matrix) over the calibration tokens (upper triangles, in double).
  const int64_t ks[4] = {c.hidden_size, c.q_size(), c.hidden_size, c.intermediate_size};
  std::vector<std::vector<double>> h(static_cast<size_t>(c.num_layers) * 4);
  int64_t seen = 0;
  if (a.method == "gptq") {
    for (int l = 0; l < c.num_layers; ++l)
      for (int m = 0; m < 4; ++m) h[static_cast<size_t>(l * 4 + m)].assign(static_cast<size_t>(ks[m] * ks[m]), 0.0);
    std::vector<float> block;
    e.model->set_linear_observer([&](int layer, LlamaModel::Matrix matrix, const Tensor& x) {
      const int64_t t = x.dim(0), k = x.dim(1);
      block.assign(static_cast<size_t>(k * k), 0.0f);
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, static_cast<int>(k), static_cast<int>(t), 1.0f,
                  x.ptr<const float>(), static_cast<int>(k), 0.0f, block.data(), static_cast<int>(k));
      std::vector<double>& acc = h[static_cast<size_t>(layer * 4 + static_cast<int>(matrix))];
      for (size_t i = 0; i < block.size(); ++i) acc[i] += block[i];
    });
    const auto docs = read_documents("convert fp8", a.calibration, a.calibration_ids, e.tokenizer.get(), false);
    std::vector<std::vector<int32_t>> chunks;
    for (const auto& d : docs)
      for (size_t s = 0; s + static_cast<size_t>(a.context) <= d.size() && seen < a.calibration_tokens;
           s += static_cast<size_t>(a.context), seen += a.context)
        chunks.emplace_back(d.begin() + static_cast<long>(s), d.begin() + static_cast<long>(s) + a.context);
    SERVE8_CHECK(!chunks.empty(), "convert fp8: no document of {} has --context {} tokens",
                 a.calibration.empty() ? a.calibration_ids : a.calibration, a.context);
    for (size_t c0 = 0; c0 < chunks.size(); c0 += kBatch) {
      const std::vector<std::vector<int32_t>> batch(
          chunks.begin() + static_cast<long>(c0),
          chunks.begin() + static_cast<long>(std::min(chunks.size(), c0 + kBatch)));
      prefill(*e.model, *e.kv, batch, first_slots(static_cast<int>(batch.size()), a.context, *e.kv),
              e.scheduler.max_prefill_tokens, e.model->max_seqs(), false);
    }
    e.model->set_linear_observer({});
    spdlog::info("convert fp8: {} calibration tokens in {} chunks", seen, chunks.size());
  }

  std::filesystem::create_directories(a.output);
  SafetensorsWriter out((std::filesystem::path(a.output) / "model.safetensors").string());
  // Tensors left unquantized keep the checkpoint's dtype; a GGUF file's (dequantized from its own
  // formats) stay fp32, which holds them exactly.
  const bool from_gguf = a.engine.model_path.ends_with(".gguf") || is_builtin_model_path(a.engine.model_path);
  const DType dense = from_gguf ? DType::kF32 : c.torch_dtype;
  std::vector<Fp8Matrix> fp8;
  // Written at finish() from the model's own (fp32, host) tensors, which outlive the writer.
  const auto add_dense = [&](const std::string& name, const Tensor& t, int64_t offset, std::vector<int64_t> shape) {
    SERVE8_CHECK(t.dtype == DType::kF32, "convert fp8: {} weights; the CPU backend's are fp32", dtype_name(t.dtype));
    const float* src = t.ptr<const float>() + offset;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    out.add(name, dense, std::move(shape),
            [src, n, dense](void* dst) { convert_elements(src, DType::kF32, dst, dense, static_cast<size_t>(n)); });
  };
  fp8.reserve(static_cast<size_t>(c.num_layers) * 4);
  const LlamaWeights& w = e.model->weights();
  add_dense("model.embed_tokens.weight", w.embed, 0, {c.vocab_size, c.hidden_size});
  add_dense("model.norm.weight", w.final_norm, 0, {c.hidden_size});
  if (!c.tie_word_embeddings) add_dense("lm_head.weight", w.lm_head, 0, {c.vocab_size, c.hidden_size});
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add_dense(p + "input_layernorm.weight", lw.attn_norm, 0, {c.hidden_size});
    add_dense(p + "post_attention_layernorm.weight", lw.ffn_norm, 0, {c.hidden_size});
    const Tensor* mats[4] = {&lw.wqkv, &lw.wo, &lw.w_gate_up, &lw.w_down};
    const auto parts = layer_modules(c, l);
    for (int m = 0; m < 4; ++m) {
      const int64_t n = mats[m]->dim(0), k = ks[m];
      const std::vector<float> wf = host_f32(*mats[m]);
      if (a.method == "gptq") {  // ssyrk filled the upper triangles: mirror them
        std::vector<double>& hm = h[static_cast<size_t>(l * 4 + m)];
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < i; ++j) hm[static_cast<size_t>(i * k + j)] = hm[static_cast<size_t>(j * k + i)];
      }
      fp8.push_back(a.method == "gptq" ? round_fp8_rows_gptq(wf, n, k, h[static_cast<size_t>(l * 4 + m)], a.damp)
                                       : round_fp8_rows(wf, n, k));
      int64_t row = 0;
      for (const HfModule& part : parts[static_cast<size_t>(m)]) {
        out.add(part.name + ".weight", DType::kFP8E4M3, {part.rows, k}, fp8.back().codes.data() + row * k);
        out.add(part.name + ".weight_scale", DType::kF32, {part.rows, 1}, fp8.back().scale.data() + row);
        row += part.rows;
      }
    }
    if (c.attention_bias) {
      int64_t row = 0;
      for (const HfModule& part : parts[0]) {
        add_dense(part.name + ".bias", lw.bqkv, row, {part.rows});
        row += part.rows;
      }
    }
    if (l % 8 == 7 || l + 1 == c.num_layers) spdlog::info("convert fp8: {} of {} layers rounded", l + 1, c.num_layers);
  }
  out.finish();

  ModelConfig written = c;
  written.torch_dtype = dense;
  nlohmann::json config = nlohmann::json::parse(model_config_to_json(written));
  const nlohmann::json scheme = {
      {"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"symmetric", true}, {"dynamic", false}};
  const nlohmann::json inputs = {
      {"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"symmetric", true}, {"dynamic", true}};
  config["quantization_config"] = {
      {"quant_method", "compressed-tensors"},
      {"format", "float-quantized"},
      {"ignore", {"lm_head"}},
      {"config_groups",
       {{"group_0",
         {{"targets", {"Linear"}},
          {"weights", scheme},
          {"input_activations", a.activations == "token" ? inputs : nlohmann::json(nullptr)}}}}},
      {"serve8", {{"rounding", a.method}, {"calibration_tokens", seen}, {"damp", a.damp}}}};
  std::ofstream((std::filesystem::path(a.output) / "config.json")) << config.dump(2) << "\n";
  // A directory's tokenizer travels along; a GGUF file's vocabulary stays in it (--tokenizer-path).
  const std::filesystem::path src(a.engine.model_path);
  if (std::filesystem::is_directory(src))
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                          "generation_config.json"})
      if (std::filesystem::exists(src / f))
        std::filesystem::copy_file(src / f, std::filesystem::path(a.output) / f,
                                   std::filesystem::copy_options::overwrite_existing);
  spdlog::info("wrote {} ({} rounding)", a.output, a.method);
  return 0;
}

}  // namespace

void register_convert_fp8(CLI::App& convert, SetAction set_action) {
  auto a = std::make_shared<ConvertFp8Args>();
  CLI::App* app = convert.add_subcommand("fp8", "to an FP8 checkpoint (compressed-tensors, e4m3 per output channel)");
  app->add_option("--model-path", a->engine.model_path, "the checkpoint to convert (HF directory, GGUF, ...)")
      ->required();
  app->add_option("--load-format", a->engine.load_format, "auto | safetensors | gguf");
  app->add_option("--output", a->output, "output directory")->required();
  app->add_option("--method", a->method, "gptq (default; needs --calibration) or rtn (each weight to nearest)");
  app->add_option("--calibration", a->calibration, "text file whose tokens gather GPTQ's input statistics");
  app->add_option("--calibration-ids", a->calibration_ids, "or token ids, a document per line (no tokenizer)");
  app->add_option("--calibration-tokens", a->calibration_tokens, "calibration tokens to use (default 16384)");
  app->add_option("--context", a->context, "tokens per calibration chunk (default 512)");
  app->add_option("--activations", a->activations,
                  "token (default: each GEMM's input quantized per token at run time) or none (weight-only FP8, "
                  "inputs kept in the compute dtype)");
  app->add_option("--damp", a->damp, "GPTQ damping, a fraction of the mean diagonal (default 0.01)");
  app->add_option("--tokenizer-path", a->engine.tokenizer_path, "tokenizer for the calibration text");
  app->callback([a, set_action] { set_action([a] { return run_convert_fp8(*a); }); });
}

}  // namespace serve8
