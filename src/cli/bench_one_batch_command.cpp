// `serve8 bench-one-batch`: the latency of one static batch, without the scheduler or the server,
// as SGLang's bench_one_batch: prefill `--input-len` random tokens for each of `--batch-size`
// sequences, then `--output-len` greedy decode steps; per batch size, the prefill latency and
// throughput and the median decode step. `--trace-steps` splits the decode step by kernel as it
// runs (CUPTI), `--trace-prefill` the prefill likewise; `--profile-steps` by op, graphs off, with
// CUDA events around each op.
// `--copy-gbps` (the device copy bandwidth, read + write, measured elsewhere) adds the decode
// step's model-bandwidth utilization: the bytes a step must read (weights, K/V) / step time / it.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/direct_batch.h"

namespace serve8 {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOneBatchArgs {
  EngineArgs engine;
  std::vector<int> batch_sizes{1};
  int input_len = 1024;
  int output_len = 16;
  int profile_steps = 0;
  int trace_steps = 0;
  bool trace_prefill = false;
  double copy_gbps = 0.0;
  std::string result_filename;
  std::string command_line;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Bytes one decode step of `bs` sequences must read at a mean context of `ctx` cached tokens: the
// weights a decode step reads and the K/V of every cached token.
double decode_step_bytes(const EngineParts& e, int bs, double ctx) {
  return e.model->decode_weight_bytes() + bs * ctx * static_cast<double>(e.kv->config().bytes_per_token());
}

struct Run {
  double prefill_s = 0.0;
  std::vector<double> decode_s;
};

// `steps` decode steps of `bs` sequences of equal length, the first at `position`, each ending in a
// greedy sample (the host sync a serving loop has too); each step's seconds. The input is token 1:
// what is decoded does not change the work.
std::vector<double> decode_steps(EngineParts& e, int bs, int position, const std::vector<int32_t>& first, int steps) {
  std::vector<int32_t> tokens(static_cast<size_t>(bs), 1), positions(static_cast<size_t>(bs));
  std::vector<SamplingRow> greedy(static_cast<size_t>(bs));
  ForwardBatch scratch;
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    std::fill(positions.begin(), positions.end(), position + s);
    const auto t = Clock::now();
    Tensor logits = decode_step(*e.model, *e.kv, scratch, tokens, positions, first);
    e.backend->sample(logits, greedy, tokens.data());
    out.push_back(seconds_since(t));
  }
  return out;
}

// The part of a step a traced kernel belongs to: a weight GEMM (serve8's GEMM kernels have "gemm"
// in their names, cuBLASLt's Hopper ones are nvjet_*), attention, or the other ops.
const char* kernel_class(const std::string& k) {
  for (const char* g : {"gemm", "xmma", "cutlass", "splitK", "nvjet"})
    if (k.find(g) != std::string::npos) return "gemm";
  return k.find("attention") != std::string::npos ? "attention" : "other";
}

// Prints the traced kernels of `n` runs of `ms` each (after the caller's opening words) and keeps
// them in j[key], with their classes' times, the device's busy time and `ms`.
void add_kernel_split(nlohmann::json& j, const std::string& key, const std::vector<OpTime>& kernels, int n, double ms) {
  double busy = 0.0;
  std::map<std::string, double> classes;
  nlohmann::json jk = nlohmann::json::array();
  for (const OpTime& k : kernels) busy += k.ms / n;
  fmt::print(", device busy {:.4f} ms):\n", busy);
  for (const OpTime& k : kernels) {
    const char* c = kernel_class(k.op);
    classes[c] += k.ms / n;
    fmt::print("    {:<40.40} {:<9} {:7.1f}/run {:9.4f} ms/run {:5.1f}%\n", k.op, c, k.calls / double(n), k.ms / n,
               100.0 * k.ms / n / ms);
    jk.push_back({{"kernel", k.op}, {"class", c}, {"calls_per_step", k.calls / double(n)}, {"ms_per_step", k.ms / n}});
  }
  fmt::print("    by class:");
  for (const auto& [c, t] : classes) fmt::print(" {} {:.4f} ms ({:.1f}%)", c, t, 100.0 * t / ms);
  fmt::print(", idle {:.4f} ms ({:.1f}%)\n", ms - busy, 100.0 * (ms - busy) / ms);
  j[key] = jk;
  j[key + "_classes_ms_per_step"] = classes;
  j[key + "_busy_ms_per_step"] = busy;
  j[key + "_step_ms"] = ms;
}

// One prefill of every sequence, then `steps` decode steps, each ending in a greedy sample (the
// host sync a serving loop has too).
Run run_batch(EngineParts& e, int bs, const std::vector<std::vector<int32_t>>& prompts,
              const std::vector<int32_t>& first, int steps) {
  LlamaModel& model = *e.model;
  Backend& backend = model.backend();
  Run r;
  backend.synchronize();
  const auto t0 = Clock::now();
  prefill(model, *e.kv, prompts, first, e.scheduler.max_prefill_tokens, model.max_seqs(), false);
  r.prefill_s = seconds_since(t0);
  r.decode_s = decode_steps(e, bs, static_cast<int>(prompts.front().size()), first, steps);
  return r;
}

int run_bench_one_batch(BenchOneBatchArgs a) {
  SERVE8_CHECK(a.input_len >= 1 && a.output_len >= 1, "bench-one-batch: --input-len and --output-len must be >= 1");
  const int max_bs = *std::max_element(a.batch_sizes.begin(), a.batch_sizes.end());
  SERVE8_CHECK(*std::min_element(a.batch_sizes.begin(), a.batch_sizes.end()) >= 1,
               "bench-one-batch: --batch-size must be >= 1");
  a.engine.scheduler.max_running_requests = std::max(a.engine.scheduler.max_running_requests, max_bs);
  a.engine.cuda_graph_max_bs = std::max(a.engine.cuda_graph_max_bs, max_bs);
  EngineParts e = create_engine_parts(a.engine);
  const int capacity = a.input_len + a.output_len + a.trace_steps + a.profile_steps + 1;
  const int vocab = e.model->config().vocab_size;
  const bool graphs = !a.engine.disable_cuda_graph && e.backend->name() == "cuda";
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(1, vocab - 1);

  // Warm-up (SGLang does one too): the first steps pay for lazy set-up.
  {
    const int bs = a.batch_sizes.front();
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(bs),
                                              std::vector<int32_t>(static_cast<size_t>(a.input_len)));
    for (auto& p : prompts)
      for (auto& t : p) t = tok(rng);
    run_batch(e, bs, prompts, first_slots(bs, capacity, *e.kv), std::min(a.output_len, 4));
  }

  std::ofstream results;
  if (!a.result_filename.empty()) {
    results.open(a.result_filename, std::ios::app);
    SERVE8_CHECK(results.good(), "bench-one-batch: cannot open {} for appending", a.result_filename);
  }
  for (int bs : a.batch_sizes) {
    std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(bs),
                                              std::vector<int32_t>(static_cast<size_t>(a.input_len)));
    for (auto& p : prompts)
      for (auto& t : p) t = tok(rng);
    const std::vector<int32_t> first = first_slots(bs, capacity, *e.kv);
    const Run r = run_batch(e, bs, prompts, first, a.output_len);
    const double dec = percentile(r.decode_s, 50);
    double decode_total = 0.0;
    for (double d : r.decode_s) decode_total += d;
    const double total = r.prefill_s + decode_total;
    fmt::print("batch {}, input {}, output {} ({}, KV {}, CUDA graphs {})\n", bs, a.input_len, a.output_len,
               e.backend->name(), dtype_name(e.kv->config().dtype), graphs ? "on" : "off");
    fmt::print("  prefill: latency {:.5f} s, throughput {:.1f} token/s\n", r.prefill_s,
               bs * static_cast<double>(a.input_len) / r.prefill_s);
    fmt::print("  decode:  median latency {:.5f} s, median throughput {:.1f} token/s\n", dec, bs / dec);
    // Step s reads input_len + s + 1 tokens of K/V: their mean over the timed steps.
    const double step_bytes = decode_step_bytes(e, bs, a.input_len + (a.output_len + 1) / 2.0);
    const double read_gbps = step_bytes / dec / 1e9;
    fmt::print("  decode:  {:.3f} GB read per step (weights + K/V), {:.1f} GB/s", step_bytes / 1e9, read_gbps);
    if (a.copy_gbps > 0) fmt::print(", MBU {:.1f}% of {:.0f} GB/s", 100.0 * read_gbps / a.copy_gbps, a.copy_gbps);
    fmt::print("\n");
    fmt::print("  total:   latency {:.4f} s, throughput {:.1f} token/s\n", total,
               bs * static_cast<double>(a.input_len + a.output_len) / total);
    nlohmann::json j = {{"command", a.command_line},
                        {"git_hash", git_hash()},
                        {"device", e.backend->device_description()},
                        {"date", utc_now()},
                        {"model_path", a.engine.model_path},
                        {"load_format", a.engine.load_format},
                        {"kv_cache_dtype", dtype_name(e.kv->config().dtype)},
                        {"weight_dtype", e.model->weight_dtype()},
                        {"weight_bytes", e.model->weight_bytes()},
                        {"cuda_graph", graphs},
                        {"batch_size", bs},
                        {"input_len", a.input_len},
                        {"output_len", a.output_len},
                        {"prefill_latency_s", r.prefill_s},
                        {"prefill_throughput", bs * static_cast<double>(a.input_len) / r.prefill_s},
                        {"median_decode_latency_s", dec},
                        {"median_decode_throughput", bs / dec},
                        {"decode_step_bytes", step_bytes},
                        {"decode_read_gb_per_s", read_gbps},
                        {"total_latency_s", total},
                        {"overall_throughput", bs * static_cast<double>(a.input_len + a.output_len) / total}};

    if (!e.model->gemm_timings().empty()) {
      nlohmann::json jt = nlohmann::json::array();
      for (const GemmTiming& t : e.model->gemm_timings())
        jt.push_back({{"n", t.n},
                      {"k", t.k},
                      {"rows", t.m},
                      {"fp8", t.fp8},
                      {"layers", t.layers},
                      {"serve8_us", t.ours_us},
                      {"library_us", t.library_us},
                      {"chosen", t.library ? "library" : "serve8"}});
      j["gemm_timings"] = jt;
    }
    if (a.copy_gbps > 0) {
      j["copy_gb_per_s"] = a.copy_gbps;
      j["decode_mbu"] = read_gbps / a.copy_gbps;
    }

    if (a.trace_steps > 0) {
      // Kernel by kernel as the timed steps ran (graphs as they were), at the positions that follow.
      e.backend->set_kernel_tracing(true);
      const std::vector<double> steps = decode_steps(e, bs, a.input_len + a.output_len, first, a.trace_steps);
      const double step_ms = 1e3 * percentile(steps, 50);
      fmt::print("  decode step kernel by kernel ({} steps, graphs {}; median step {:.4f} ms", a.trace_steps,
                 graphs ? "on" : "off", step_ms);
      add_kernel_split(j, "kernel_trace", charge_kernel_time(e.backend->kernel_trace()), a.trace_steps, step_ms);
    }

    if (a.trace_prefill) {
      // The same prompts again into the same slots, every kernel traced: the prompt step's split.
      e.backend->synchronize();
      e.backend->set_kernel_tracing(true);
      const auto t = Clock::now();
      prefill(*e.model, *e.kv, prompts, first, e.scheduler.max_prefill_tokens, e.model->max_seqs(), false);
      const std::vector<OpTime> kernels = charge_kernel_time(e.backend->kernel_trace());  // waits for the device
      const double ms = 1e3 * seconds_since(t);
      fmt::print("  prefill kernel by kernel ({} tokens; {:.4f} ms", bs * a.input_len, ms);
      add_kernel_split(j, "prefill_trace", kernels, 1, ms);
    }

    if (a.profile_steps > 0) {
      // Op by op (graphs would hide the ops), after the timed steps, at the positions that follow.
      e.model->disable_decode_graphs();
      e.backend->set_op_profiling(true);
      decode_steps(e, bs, a.input_len + a.output_len + a.trace_steps, first, a.profile_steps);
      const std::vector<OpTime> ops = e.backend->op_profile();
      e.backend->set_op_profiling(false);
      double sum = 0.0;
      for (const OpTime& o : ops) sum += o.ms;
      fmt::print("  decode step op by op ({} steps, graphs off; ops {:.4f} ms/step):\n", a.profile_steps,
                 sum / a.profile_steps);
      nlohmann::json jo = nlohmann::json::array();
      for (const OpTime& o : ops) {
        fmt::print("    {:<12} {:8.4f} ms/step  {:5.1f}%\n", o.op, o.ms / a.profile_steps, 100.0 * o.ms / sum);
        jo.push_back({{"op", o.op}, {"ms_per_step", o.ms / a.profile_steps}, {"share", o.ms / sum}});
      }
      j["op_profile"] = jo;
      j["op_profile_ms_per_step"] = sum / a.profile_steps;
      if (graphs) e.model->enable_decode_graphs(*e.kv, std::min(a.engine.cuda_graph_max_bs, e.model->max_seqs()));
    }
    if (results.is_open()) results << j.dump() << "\n" << std::flush;
  }
  return 0;
}

}  // namespace

void register_bench_one_batch(CLI::App& root, SetAction set_action) {
  auto a = std::make_shared<BenchOneBatchArgs>();
  CLI::App* app = root.add_subcommand("bench-one-batch", "latency of one static batch: prefill, then decode steps");
  add_engine_options(*app, a->engine);
  app->add_option("--batch-size", a->batch_sizes, "batch sizes to run, one after another")->expected(1, 64);
  app->add_option("--input-len", a->input_len, "prompt tokens per sequence (random ids)");
  app->add_option("--output-len", a->output_len, "decode steps");
  app->add_option("--profile-steps", a->profile_steps,
                  "then this many decode steps op by op (graphs off), timing each op with CUDA events");
  app->add_option("--trace-steps", a->trace_steps,
                  "then this many decode steps with every kernel traced (CUPTI, CUDA graphs as timed): each "
                  "kernel's share of the step, counting overlapping kernels once");
  app->add_flag("--trace-prefill", a->trace_prefill,
                "then the batch's prefill again with every kernel traced (CUPTI): each kernel's share of it");
  app->add_option("--result-filename", a->result_filename, "append one JSON line per batch size here");
  app->add_option("--copy-gbps", a->copy_gbps,
                  "the device's copy bandwidth (GB/s, read + write): adds the decode step's MBU")
      ->check(CLI::NonNegativeNumber);
  app->callback([a, set_action] {
    a->command_line = invoked_command_line();
    set_action([a] { return run_bench_one_batch(*a); });
  });
}

}  // namespace serve8
