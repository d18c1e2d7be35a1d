// `serve8 eval kld`: how far a KV dtype (or, with --quantization, FP8 weights) moves the model's
// predictions from a reference, as llama.cpp's --kl-divergence reports it. Two KV pools (and with
// --quantization a second model holding the checkpoint's own weights): every step runs once per
// side with the same tokens. The text is cut into chunks of --context tokens (a new chunk every
// --stride, each document on its own, each chunk led by BOS where the model takes one); in each, the first half is
// prefilled and the second half is fed one token per decode step (teacher forcing), and every prediction of the second
// half is scored: its attention reads the quantized pool, as a served request's decode steps do.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/token_input.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/direct_batch.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

namespace {

struct EvalKldArgs {
  EngineArgs engine;
  std::string text_file, ids_file;
  std::string reference = "bf16";
  std::string reference_model;  // empty: the model under test, unquantized
  int context = 512;
  int stride = 0;  // 0: = context
  int max_chunks = 0;
  std::string output_file;
};

// Per scored prediction: KLD(ref || test), top-1 agreement, NLL of the true next token under both,
// and its probability under both.
struct Scores {
  std::vector<double> kld, nll_ref, nll_test, dp;
  int64_t same_top1 = 0;
  void add(const float* ref, const float* test, int64_t vocab, int32_t target) {
    double mr = -INFINITY, mt = -INFINITY;
    int64_t ar = 0, at = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (ref[i] > mr) mr = ref[i], ar = i;
      if (test[i] > mt) mt = test[i], at = i;
    }
    double zr = 0.0, zt = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      zr += std::exp(ref[i] - mr);
      zt += std::exp(test[i] - mt);
    }
    const double lzr = mr + std::log(zr), lzt = mt + std::log(zt);
    double k = 0.0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double lr = ref[i] - lzr, lt = test[i] - lzt;
      k += std::exp(lr) * (lr - lt);
    }
    kld.push_back(std::max(k, 0.0));
    same_top1 += ar == at;
    nll_ref.push_back(lzr - ref[target]);
    nll_test.push_back(lzt - test[target]);
    dp.push_back(std::exp(test[target] - lzt) - std::exp(ref[target] - lzr));
  }
};

int run_eval_kld(EvalKldArgs a) {
  SERVE8_CHECK(a.context >= 4, "eval kld: --context must be >= 4");
  if (a.stride <= 0) a.stride = a.context;
  if (a.engine.model_path.empty()) default_to_builtin_model(a.engine);
  a.engine.disable_cuda_graph = true;  // two pools; op by op keeps both paths the same
  const int batch = 16;
  if (a.engine.max_total_tokens <= 0) a.engine.max_total_tokens = int64_t{batch} * a.context + 1;
  a.engine.scheduler.max_running_requests = std::max(a.engine.scheduler.max_running_requests, batch);
  EngineParts e = create_engine_parts(a.engine);  // the pool under test, with its scales
  KvCacheConfig rc = e.kv->config();
  rc.dtype = parse_dtype(a.reference);
  std::unique_ptr<KvCache> ref_kv =
      e.backend->create_kv_cache(rc, KvScales::ones(rc.num_layers, rc.num_kv_heads));  // reference: no scales
  const std::vector<std::vector<int32_t>> docs =
      read_documents("eval kld", a.text_file, a.ids_file, e.tokenizer.get(), false);
  // Chunks of each document, each led by BOS, as llama.cpp's perplexity does: a model trained on
  // documents that start with it is lost mid-text without it. A tokenizer that puts none in front
  // of a text (SmolLM2, Qwen2: their BOS id is a chat marker) says the model was not.
  int bos = e.model->config().bos_token_id;
  if (!a.text_file.empty() && e.tokenizer->encode("", true).empty()) bos = -1;
  std::vector<std::vector<int32_t>> chunks;
  size_t num_tokens = 0;
  for (const std::vector<int32_t>& doc : docs) {
    num_tokens += doc.size();
    for (size_t s = 0, n = 0; s < doc.size(); s += std::min(static_cast<size_t>(a.stride), n)) {
      std::vector<int32_t> c;
      if (bos >= 0 && doc[s] != bos) c.push_back(bos);
      n = std::min(doc.size() - s, static_cast<size_t>(a.context) - c.size());
      c.insert(c.end(), doc.begin() + static_cast<long>(s), doc.begin() + static_cast<long>(s + n));
      if (static_cast<int>(c.size()) == a.context || (s == 0 && c.size() >= 4)) chunks.push_back(std::move(c));
      if (s + n >= doc.size()) break;
    }
  }
  if (a.max_chunks > 0 && static_cast<int>(chunks.size()) > a.max_chunks)
    chunks.resize(static_cast<size_t>(a.max_chunks));
  SERVE8_CHECK(!chunks.empty(), "eval kld: the text has {} tokens, too few to score", num_tokens);

  LlamaModel& model = *e.model;
  // The unquantized weights, when the test side quantizes them, or another checkpoint's (an FP8
  // one made by `serve8 convert fp8` against its source).
  std::unique_ptr<LlamaModel> ref_owner;
  if (parse_weight_quant(a.engine.quantization) != WeightQuant::kNone || !a.reference_model.empty()) {
    LoadOptions lo;
    lo.model_path = a.reference_model.empty() ? a.engine.model_path : a.reference_model;
    lo.load_format = a.reference_model.empty() ? a.engine.load_format : "auto";
    lo.seed = a.engine.seed;
    ref_owner = load_llama_model(lo, *e.backend, model.max_tokens(), model.max_seqs());
  }
  LlamaModel& ref_model = ref_owner ? *ref_owner : model;
  const int64_t vocab = model.config().vocab_size;
  Scores sc;
  // Steps run in lockstep over a batch of chunks: batch chunks of one length together.
  std::stable_sort(chunks.begin(), chunks.end(), [](const auto& x, const auto& y) { return x.size() > y.size(); });
  for (size_t c0 = 0; c0 < chunks.size();) {
    size_t n = 0;
    while (c0 + n < chunks.size() && n < static_cast<size_t>(batch) && chunks[c0 + n].size() == chunks[c0].size()) ++n;
    const int len = static_cast<int>(chunks[c0].size());
    const int half = len / 2;
    std::vector<std::vector<int32_t>> heads;
    for (size_t i = 0; i < n; ++i) heads.emplace_back(chunks[c0 + i].begin(), chunks[c0 + i].begin() + half);
    const std::vector<int32_t> first = first_slots(static_cast<int>(n), len, *e.kv);
    const auto lr = prefill(ref_model, *ref_kv, heads, first, e.scheduler.max_prefill_tokens, model.max_seqs(), true);
    const auto lt = prefill(model, *e.kv, heads, first, e.scheduler.max_prefill_tokens, model.max_seqs(), true);
    for (size_t i = 0; i < n; ++i) sc.add(lr[i].data(), lt[i].data(), vocab, chunks[c0 + i][static_cast<size_t>(half)]);
    std::vector<float> hr(n * static_cast<size_t>(vocab)), ht(hr.size());
    ForwardBatch scratch;
    for (int j = half; j + 1 < len; ++j) {
      std::vector<int32_t> tokens(n), positions(n, j);
      for (size_t i = 0; i < n; ++i) tokens[i] = chunks[c0 + i][static_cast<size_t>(j)];
      Tensor r = decode_step(ref_model, *ref_kv, scratch, tokens, positions, first);
      e.backend->copy_to_host(hr.data(), r.data, hr.size() * sizeof(float));
      Tensor t = decode_step(model, *e.kv, scratch, tokens, positions, first);
      e.backend->copy_to_host(ht.data(), t.data, ht.size() * sizeof(float));
      for (size_t i = 0; i < n; ++i)
        sc.add(hr.data() + i * vocab, ht.data() + i * vocab, vocab, chunks[c0 + i][static_cast<size_t>(j + 1)]);
    }
    c0 += n;
  }

  const size_t m = sc.kld.size();
  const double kmean = mean(sc.kld);
  double var = 0.0;
  for (double k : sc.kld) var += (k - kmean) * (k - kmean);
  const double kerr = m > 1 ? std::sqrt(var / static_cast<double>(m - 1) / static_cast<double>(m)) : 0.0;
  std::vector<double> sorted = sc.kld;
  std::sort(sorted.begin(), sorted.end());
  const double p99 = sorted[std::min(m - 1, static_cast<size_t>(0.99 * static_cast<double>(m - 1) + 0.5))];
  const double ppl_ref = std::exp(mean(sc.nll_ref)), ppl_test = std::exp(mean(sc.nll_test));
  double dp2 = 0.0;
  for (double d : sc.dp) dp2 += d * d;
  const double rms_dp = std::sqrt(dp2 / static_cast<double>(m));
  const std::string test_dtype(dtype_name(e.kv->config().dtype));
  fmt::print(
      "weights {}, KV {} against weights {}, KV {}: {} chunks of {} tokens, {} scored predictions (decode "
      "steps over the pool)\n",
      model.weight_dtype(), test_dtype, ref_model.weight_dtype(), a.reference, chunks.size(), chunks[0].size(), m);
  fmt::print("Mean    KLD: {:10.6f} ± {:.6f}\n", kmean, kerr);
  fmt::print("99.0%   KLD: {:10.6f}\n", p99);
  fmt::print("Maximum KLD: {:10.6f}\n", sorted.back());
  fmt::print("Same top p : {:6.3f} %\n", 100.0 * static_cast<double>(sc.same_top1) / static_cast<double>(m));
  fmt::print("PPL({})  : {:10.4f}\nPPL({}) : {:10.4f}\nΔPPL       : {:+10.4f}\n", a.reference, ppl_ref, test_dtype,
             ppl_test, ppl_test - ppl_ref);
  fmt::print("RMS Δp     : {:6.3f} %\n", 100.0 * rms_dp);
  if (!a.output_file.empty()) {
    const nlohmann::json j = {{"command", invoked_command_line()},
                              {"git_hash", git_hash()},
                              {"date", utc_now()},
                              {"device", e.backend->device_description()},
                              {"kv_cache_dtype", test_dtype},
                              {"weight_dtype", model.weight_dtype()},
                              {"reference_weight_dtype", ref_model.weight_dtype()},
                              {"reference_kv_cache_dtype", a.reference},
                              {"quantization_param_path", a.engine.quantization_param_path},
                              {"chunks", chunks.size()},
                              {"context", chunks[0].size()},
                              {"scored", m},
                              {"mean_kld", kmean},
                              {"mean_kld_stderr", kerr},
                              {"p99_kld", p99},
                              {"max_kld", sorted.back()},
                              {"same_top1", static_cast<double>(sc.same_top1) / static_cast<double>(m)},
                              {"ppl_reference", ppl_ref},
                              {"ppl", ppl_test},
                              {"delta_ppl", ppl_test - ppl_ref},
                              {"rms_delta_p", rms_dp}};
    std::ofstream out(a.output_file, std::ios::app);
    SERVE8_CHECK(out.good(), "eval kld: cannot open {} for appending", a.output_file);
    out << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

void register_eval_kld(CLI::App& eval, SetAction set_action) {
  auto a = std::make_shared<EvalKldArgs>();
  CLI::App* app = eval.add_subcommand("kld", "KL divergence of a KV dtype's predictions from a reference KV dtype");
  add_engine_options(*app, a->engine);
  app->add_option("--text", a->text_file, "text file (tokenized with the model's tokenizer)");
  app->add_option("--ids-file", a->ids_file, "token ids separated by whitespace (models without a tokenizer)");
  app->add_option("--reference-kv-cache-dtype", a->reference, "bf16 (default), fp16, or fp32 (CPU / --dtype float32)");
  app->add_option("--reference-model-path", a->reference_model,
                  "the reference's weights (default: the model under test, unquantized)");
  app->add_option("--context", a->context, "tokens per chunk; the second half is scored");
  app->add_option("--stride", a->stride, "tokens between chunk starts (default: --context)");
  app->add_option("--max-chunks", a->max_chunks, "score at most this many chunks");
  app->add_option("--output-file", a->output_file, "append one JSON line of results here");
  app->callback([a, set_action] { set_action([a] { return run_eval_kld(*a); }); });
}

}  // namespace serve8
