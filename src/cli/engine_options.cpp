#include "cli/engine_options.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "model/builtin_models.h"

namespace serve8 {

namespace {

namespace fs = std::filesystem;

// The Llama-2 tokenizer for the built-in model: ../shared beside the working directory (a
// checkout's usual layout), else beside the source tree this binary was built from.
std::string find_builtin_tokenizer() {
  const fs::path rel = fs::path("shared") / "models" / "llama2-tokenizer";
  const fs::path candidates[] = {fs::path("..") / rel, fs::path(__FILE__).parent_path() / ".." / ".." / ".." / rel};
  for (const fs::path& c : candidates)
    if (fs::exists(c / "tokenizer.model")) return fs::weakly_canonical(c).string();
  return "";
}

}  // namespace

std::string find_default_model() {
  std::vector<fs::path> dirs;
  // The one environment variable serve8 reads: where scripts/setup.sh put the default model (README).
  if (const char* env = std::getenv("SERVE8_MODELS_DIR"); env != nullptr && *env != '\0') dirs.emplace_back(env);
  dirs.emplace_back(".models");
  // <checkout>/<build>/src/cli/serve8: a binary run from elsewhere still finds its checkout's.
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(exe.parent_path() / ".." / ".." / ".." / ".models");
  for (const fs::path& d : dirs)
    if (fs::is_regular_file(d / kDefaultModelFile, ec)) return fs::weakly_canonical(d / kDefaultModelFile).string();
  return "";
}

void default_to_builtin_model(EngineArgs& a) {
  a.model_path = kBuiltinTinyLlamaPath;
  if (a.tokenizer_path.empty()) a.tokenizer_path = find_builtin_tokenizer();
}

void add_engine_options(CLI::App& app, EngineArgs& a) {
  app.add_option("--model-path,--model", a.model_path, "HF model directory (config.json, *.safetensors)");
  app.add_option("--tokenizer-path", a.tokenizer_path, "tokenizer directory or file (default: the model's)");
  app.add_option("--chat-template", a.chat_template,
                 "a Jinja chat template file, or the template itself, instead of the tokenizer's");
  app.add_option("--load-format", a.load_format, "auto | safetensors | dummy (seeded random weights)");
  app.add_option("--quantization", a.quantization,
                 "fp8: quantize the layers' matrices at load to float8_e4m3, one scale per output channel; "
                 "activations per token");
  app.add_option("--device", a.device, "auto | cpu | cuda");
  app.add_option("--dtype", a.dtype,
                 "weights and activations: auto (bfloat16 on cuda, float32 on cpu) | bfloat16 | float32 (cuda: "
                 "head dims 8/16/32 only)");
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype,
                 "auto | fp32 (needs --dtype float32 on cuda) | bf16 | fp16 | fp8_e5m2 | fp8_e4m3 | "
                 "int8 (rotated rows, a scale per token and KV head) | int4 (rotated rows, 4 bits with a scale and "
                 "minimum per token and KV head)");
  app.add_option("--quantization-param-path", a.quantization_param_path,
                 "fp8_e4m3 KV scales, and the K/V means int8/int4 rows centre on: SGLang/vLLM JSON, as `serve8 "
                 "calibrate` writes it");
  app.add_option("--max-total-tokens", a.max_total_tokens, "KV pool size in tokens (default: from memory)");
  app.add_option("--mem-fraction-static", a.mem_fraction_static, "fraction of GPU memory for weights + KV pool");
  app.add_option("--context-length", a.context_length, "longest prompt + output (default: the model's)");
  app.add_option("--random-seed", a.seed, "seed of dummy weights");
  app.add_option("--max-running-requests", a.scheduler.max_running_requests, "most requests in a batch");
  app.add_option("--chunked-prefill-size", a.scheduler.chunked_prefill_size,
                 "most prompt tokens of one request per step");
  app.add_option("--max-prefill-tokens", a.scheduler.max_prefill_tokens, "most prompt tokens per step");
  app.add_flag("--disable-radix-cache", a.scheduler.disable_radix_cache, "turn the prefix cache off");
  app.add_option("--schedule-conservativeness", a.scheduler.schedule_conservativeness,
                 "room admission keeps for running requests' future tokens, as SGLang's (0: one token each)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cuda-graph-max-bs", a.cuda_graph_max_bs,
                 "decode steps of up to this many requests replay CUDA graphs (capped by --max-running-requests)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--disable-cuda-graph", a.disable_cuda_graph, "run every step op by op");
  app.add_option("--gemm-tuning", a.gemm_tuning,
                 "cuda: time serve8's skinny GEMM against cuBLASLt on each decode shape as the CUDA graphs are "
                 "captured and keep the faster; auto: the shapes bench_gemm's table lacks for this GPU, all: every "
                 "shape, off: the table's verdicts and the defaults")
      ->check(CLI::IsMember({"auto", "all", "off"}));
  app.add_option("--tp-size,--tp", a.tp_size,
                 "tensor parallelism: shard the model over this many ranks, one thread each (cpu; cuda: one GPU "
                 "each over NCCL; at most the model's KV heads)")
      ->check(CLI::PositiveNumber);
  app.add_option("--nnodes", a.nnodes,
                 "processes (machines) the --tp-size ranks are spread over, --tp-size / --nnodes each (cpu, Gloo)")
      ->check(CLI::PositiveNumber);
  app.add_option("--node-rank", a.node_rank,
                 "this process's place among --nnodes: 0 schedules and serves, the others run its steps")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dist-init-addr", a.dist_init_addr, "HOST:PORT where node 0 meets the other nodes (--nnodes > 1)");
}

void add_sampling_options(CLI::App& app, SamplingParams& p) {
  app.add_option("--max-new-tokens", p.max_new_tokens, "tokens to generate at most");
  app.add_option("--temperature", p.temperature, "0 = greedy");
  app.add_option("--top-p", p.top_p);
  app.add_option("--top-k", p.top_k);
  app.add_option("--min-p", p.min_p);
  app.add_option("--seed", p.seed, "sampling seed");
  app.add_option("--stop", p.stop, "stop strings");
  app.add_flag("--ignore-eos", p.ignore_eos, "keep going past EOS");
}

}  // namespace serve8
