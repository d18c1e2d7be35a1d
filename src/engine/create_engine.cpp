// create_engine: turns command-line arguments into a backend, a model, a KV pool sized to the
// memory left, and a tokenizer.
#include <filesystem>
#include <thread>
#include <tuple>

#include "backend/gloo/gloo_communicator.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/builtin_models.h"
#include "model/kv_scales.h"
#include "model/tp_group.h"

namespace serve8 {

namespace {

// --dtype, SGLang's names: the dtype of weights and activations on `device`.
DType resolve_compute_dtype(const std::string& name, const std::string& device) {
  if (name == "auto") return device == "cpu" ? DType::kF32 : DType::kBF16;
  if (name == "bfloat16" || name == "bf16") return DType::kBF16;
  if (name == "float32" || name == "float" || name == "fp32") return DType::kF32;
  SERVE8_CHECK(name != "float16" && name != "half" && name != "fp16",
               "--dtype {}: fp16 compute is not supported yet (use bfloat16 or float32)", name);
  fail("unknown --dtype '{}' (expected auto, bfloat16 or float32)", name);
}

// The KV dtype a user asked for, checked against what the backend can store.
DType resolve_kv_dtype(const std::string& name, const Backend& backend) {
  if (name == "auto") return backend.compute_dtype();
  const DType t = parse_dtype(name);
  SERVE8_CHECK(t != DType::kF32 || backend.compute_dtype() == DType::kF32,
               "--kv-cache-dtype fp32 needs fp32 compute (--dtype float32, or the CPU backend)");
  return t;
}

// reserved: device bytes the KV cache takes beside the pool (its request table, and the batch's
// copy of the table's rows that a step reads).
int64_t pool_slots(const EngineArgs& args, const Backend& backend, size_t bytes_per_token, size_t reserved) {
  if (args.max_total_tokens > 0) return args.max_total_tokens + 1;  // + the reserved slot 0
  const size_t total = backend.total_memory();
  const size_t free = backend.free_memory();
  if (backend.name() != "cpu" && total > 0) {
    // --mem-fraction-static of the device is for weights, activations and the pool together; the
    // first two are already allocated, so the pool takes what is left of the fraction.
    const double budget = args.mem_fraction_static * static_cast<double>(total) - static_cast<double>(total - free) -
                          static_cast<double>(reserved);
    SERVE8_CHECK(budget > static_cast<double>(bytes_per_token) * 16,
                 "--mem-fraction-static {} leaves no room for the KV pool: {:.2f} GiB in use of {:.2f} GiB",
                 args.mem_fraction_static, static_cast<double>(total - free) / (1 << 30),
                 static_cast<double>(total) / (1 << 30));
    return static_cast<int64_t>(budget / static_cast<double>(bytes_per_token));
  }
  // CPU: a modest default, never more than a quarter of free memory.
  int64_t n = 65536;
  if (free > 0) n = std::min<int64_t>(n, static_cast<int64_t>(free / 4 / bytes_per_token));
  return std::max<int64_t>(n, 64);
}

// fp8_e4m3 scales: --quantization-param-path, else the checkpoint's, else 1.0 with a warning that
// names what was looked for. int8 and int4 take only the file's K/V means (their rows carry their
// own scales). Other KV dtypes store values as they are.
KvScales resolve_kv_scales(const EngineArgs& args, const ModelConfig& mc, DType kv) {
  KvScales ones = KvScales::ones(mc.num_layers, mc.num_kv_heads);
  if (kv_dtype_is_rotated(kv) && !args.quantization_param_path.empty()) {
    const KvScales s = read_kv_scales_json(args.quantization_param_path, mc.num_layers, mc.num_kv_heads, mc.head_dim);
    if (s.k_mean.empty()) {
      spdlog::warn(
          "--quantization-param-path {} has no k_mean/v_mean (`serve8 calibrate` writes them): {} rows are "
          "stored uncentred",
          args.quantization_param_path, dtype_name(kv));
    } else {
      spdlog::info("{} KV rows centred on the K/V means of {}", dtype_name(kv), args.quantization_param_path);
      ones.k_mean = s.k_mean;
      ones.v_mean = s.v_mean;
    }
    return ones;
  }
  if (kv != DType::kFP8E4M3) {
    if (!args.quantization_param_path.empty())
      spdlog::warn("--quantization-param-path {} is ignored: --kv-cache-dtype {} takes no scales",
                   args.quantization_param_path, dtype_name(kv));
    return ones;
  }
  if (!args.quantization_param_path.empty()) {
    KvScales s = read_kv_scales_json(args.quantization_param_path, mc.num_layers, mc.num_kv_heads);
    spdlog::info("fp8_e4m3 KV scales from {}", args.quantization_param_path);
    return s;
  }
  if (!is_builtin_model_path(args.model_path) && args.load_format != "dummy") {
    if (std::optional<KvScales> s = read_checkpoint_kv_scales(args.model_path, mc.num_layers, mc.num_kv_heads)) {
      spdlog::info("fp8_e4m3 KV scales from the checkpoint {}", args.model_path);
      return *s;
    }
  }
  spdlog::warn(
      "--kv-cache-dtype fp8_e4m3: no --quantization-param-path was given and {} has no k/v scale tensors "
      "(self_attn.k_scale/v_scale, k_proj/v_proj.output_scale); using 1.0 for every layer and head. Values beyond "
      "+-448 will saturate: run `serve8 calibrate` to measure scales",
      args.model_path);
  return ones;
}

LoadOptions load_options(const EngineArgs& args) {
  LoadOptions lo;
  lo.model_path = args.model_path;
  lo.load_format = args.load_format;
  lo.seed = args.seed;
  lo.quantization = parse_weight_quant(args.quantization);
  return lo;
}

// This process's ranks of a group across processes: tp_size / nnodes consecutive ones.
std::vector<int> node_ranks(const EngineArgs& args) {
  SERVE8_CHECK(args.nnodes >= 1 && args.node_rank >= 0 && args.node_rank < args.nnodes,
               "--node-rank {} must be in [0, --nnodes {})", args.node_rank, args.nnodes);
  SERVE8_CHECK(args.tp_size % args.nnodes == 0, "--tp-size {} must be a multiple of --nnodes {}", args.tp_size,
               args.nnodes);
  SERVE8_CHECK(!args.dist_init_addr.empty(), "--nnodes {} needs --dist-init-addr HOST:PORT (node 0's address)",
               args.nnodes);
  const int per_node = args.tp_size / args.nnodes;
  std::vector<int> ranks;
  for (int i = 0; i < per_node; ++i) ranks.push_back(args.node_rank * per_node + i);
  return ranks;
}

// Rank m's KV pool: its KV heads (and their scales); the slots are the same on every rank.
std::unique_ptr<KvCache> rank_pool(const KvCacheConfig& kc, const KvScales& scales, const LlamaModel& m, Backend& b) {
  KvCacheConfig rc = kc;
  rc.num_kv_heads = m.tp_shard().num_kv_heads;
  return b.create_kv_cache(rc, shard_kv_scales(scales, m.config(), m.tp_shard()));
}

GlooGroupOptions gloo_options(const EngineArgs& args, const std::vector<int>& ranks) {
  GlooGroupOptions o;
  std::tie(o.host, o.port) = parse_dist_init_addr(args.dist_init_addr);
  o.size = args.tp_size;
  o.ranks = ranks;
  return o;
}

}  // namespace

void run_tp_node(const EngineArgs& args) {
  std::string device = args.device;
  if (device == "auto") device = "cpu";
  SERVE8_CHECK(device == "cpu", "--nnodes: tensor parallelism across processes runs on the CPU backend (--device {})",
               device);
  SERVE8_CHECK(args.node_rank > 0, "run_tp_node is for --node-rank 1 and up");
  const std::vector<int> ranks = node_ranks(args);
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  for (size_t i = 0; i < ranks.size(); ++i) {
    owned.push_back(create_backend(device, resolve_compute_dtype(args.dtype, device)));
    backends.push_back(owned.back().get());
  }
  const SchedulerConfig& sc = args.scheduler;
  const int max_tokens = sc.max_prefill_tokens + sc.max_running_requests;
  const LoadOptions lo = load_options(args);
  GlooGroup gloo(gloo_options(args, ranks));
  std::vector<std::unique_ptr<LlamaModel>> models = load_tp_shards(
      lo, args.tp_size, ranks, backends, [&](const ModelConfig&) { return gloo.take_communicators(); }, max_tokens,
      sc.max_running_requests);
  const ModelConfig& mc = models[0]->config();
  KvCacheConfig kc;
  kc.num_layers = mc.num_layers;
  kc.head_dim = mc.head_dim;
  kc.dtype = resolve_kv_dtype(args.kv_cache_dtype, *backends[0]);
  kc.max_requests = sc.max_running_requests;
  kc.max_context_len = args.context_length > 0 ? args.context_length : mc.max_position_embeddings;
  const KvScales scales = resolve_kv_scales(args, mc, kc.dtype);
  spdlog::info("node {} of {}: ranks {} ready; waiting for node 0's steps", args.node_rank, args.nnodes,
               fmt::join(ranks, ","));
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        serve_tp_rank(*models[i], [&](int64_t slots) {
          KvCacheConfig rc = kc;
          rc.num_slots = slots;
          return rank_pool(rc, scales, *models[i], *backends[i]);
        });
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  spdlog::info("node {}: node 0 stopped the group", args.node_rank);
}

EngineParts create_engine_parts(const EngineArgs& args) {
  std::string device = args.device;
  if (device == "auto") device = cuda_available() ? "cuda" : "cpu";
  const GemmTuning tuning = parse_gemm_tuning(args.gemm_tuning);
  std::unique_ptr<Backend> backend = create_backend(device, resolve_compute_dtype(args.dtype, device));
  backend->set_gemm_tuning(tuning);
  spdlog::info("backend: {} ({}), compute {}", backend->name(), backend->device_description(),
               dtype_name(backend->compute_dtype()));

  SchedulerConfig sc = args.scheduler;
  sc.chunked_prefill_size = std::min(sc.chunked_prefill_size, sc.max_prefill_tokens);
  const int max_tokens = sc.max_prefill_tokens + sc.max_running_requests;
  const LoadOptions lo = load_options(args);
  SERVE8_CHECK(args.tp_size >= 1, "--tp-size {} must be at least 1", args.tp_size);
  std::unique_ptr<LlamaModel> model;
  std::vector<TpPeer> peers;
  std::shared_ptr<GlooGroup> gloo;  // across processes: node 0's ranks and the rendezvous
  if (args.nnodes == 1 && args.tp_size == 1) {
    model = load_llama_model(lo, *backend, max_tokens, sc.max_running_requests);
  } else {
    int local_ranks = args.tp_size;
    if (args.nnodes > 1) {
      SERVE8_CHECK(args.node_rank == 0, "--node-rank {}: only node 0 serves; the others run run_tp_node",
                   args.node_rank);
      const std::vector<int> ranks = node_ranks(args);
      local_ranks = static_cast<int>(ranks.size());
      gloo = std::make_shared<GlooGroup>(gloo_options(args, ranks));
    } else {
      backend->check_communicators(args.tp_size);  // refused before loading, by name
    }
    const DType compute = backend->compute_dtype();
    model = load_tp_llama_model(
        lo, *backend, args.tp_size, local_ranks, 
        [&](int rank) {
          std::unique_ptr<Backend> b = create_backend(device, compute, rank);
          b->set_gemm_tuning(tuning);
          return b;
        },
        [&](const ModelConfig& c) {
          return gloo ? gloo->take_communicators()
                      : backend->create_communicators(args.tp_size, int64_t{max_tokens} * c.hidden_size);
        },
        max_tokens, sc.max_running_requests, peers);
  }
  const ModelConfig& mc = model->config();
  if (backend->name() == "cuda" && backend->compute_dtype() == DType::kF32 && mc.head_dim > 32) {
    spdlog::warn(
        "--dtype float32 on CUDA: attention runs on the generic CUDA-core kernel, a reference path that is "
        "slow for head_dim {} (the tensor-core kernels are bf16)",
        mc.head_dim);
  }
  sc.context_length = args.context_length > 0 ? args.context_length : mc.max_position_embeddings;

  KvCacheConfig kc;
  kc.num_layers = mc.num_layers;
  kc.num_kv_heads = mc.num_kv_heads;
  kc.head_dim = mc.head_dim;
  kc.dtype = resolve_kv_dtype(args.kv_cache_dtype, *backend);
  kc.max_requests = sc.max_running_requests;
  kc.max_context_len = sc.context_length;
  const size_t table_bytes =
      static_cast<size_t>(kc.max_requests + 1) * static_cast<size_t>(kc.max_context_len) * sizeof(int32_t);
  kc.num_slots = pool_slots(args, *backend, kc.bytes_per_token(), 2 * table_bytes);
  const KvScales scales = resolve_kv_scales(args, mc, kc.dtype);
  std::unique_ptr<KvCache> kv;
  if (peers.empty() && !gloo) {
    kv = backend->create_kv_cache(kc, scales);
  } else {
    kv = rank_pool(kc, scales, *model, *backend);
    for (TpPeer& p : peers) p.kv = rank_pool(kc, scales, *p.model, *p.backend);
    if (gloo) {
      model->attach_tp_group(std::move(peers), kc.num_slots, gloo);
    } else {
      model->attach_tp_peers(std::move(peers));
    }
  }
  spdlog::info("KV pool: {} tokens of {} ({} bytes per token, {:.2f} GiB); max running requests {}", kc.num_slots - 1,
               dtype_name(kc.dtype), kc.bytes_per_token(),
               static_cast<double>(kc.bytes_per_token() * static_cast<size_t>(kc.num_slots)) / (1 << 30),
               sc.max_running_requests);

  std::unique_ptr<Tokenizer> tokenizer;
  std::string tok_path = args.tokenizer_path;
  if (tok_path.empty()) {
    // A GGUF file carries its own vocabulary; a config.json or checkpoint file looks beside itself.
    std::filesystem::path p(args.model_path);
    const bool beside = !std::filesystem::is_directory(p) && p.extension() != ".gguf";
    tok_path = beside ? p.parent_path().string() : p.string();
  }
  try {
    tokenizer = load_tokenizer(tok_path, args.chat_template);
  } catch (const Error& e) {
    if (!args.tokenizer_path.empty() || !args.chat_template.empty()) throw;
    spdlog::warn("no tokenizer at {}: requests must send token ids ({})", tok_path, e.what());
  }
  if (args.disable_cuda_graph) {
    spdlog::info("CUDA graphs: off (--disable-cuda-graph)");
  } else if (backend->name() == "cuda") {
    model->enable_decode_graphs(*kv, std::min(args.cuda_graph_max_bs, sc.max_running_requests));
  }
  return EngineParts{std::move(backend), std::move(model), std::move(kv), std::move(tokenizer), sc};
}

std::unique_ptr<Engine> create_engine(const EngineArgs& args) {
  EngineParts p = create_engine_parts(args);
  return std::make_unique<Engine>(std::move(p.backend), std::move(p.model), std::move(p.kv), std::move(p.tokenizer),
                                  p.scheduler);
}

}  // namespace serve8
