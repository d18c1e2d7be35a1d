// `serve8 bench-offline`: throughput of the engine in this process, no HTTP (SGLang's
// bench_offline_throughput): every request of the dataset is submitted at once and the engine's
// scheduler thread runs them to completion; reports request and token throughput, TTFT and
// end-to-end latency, the KV pool size and the peak number of running requests.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/bench_dataset.h"
#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"

namespace serve8 {

namespace {

struct BenchOfflineArgs {
  EngineArgs engine;
  BenchDatasetOptions data;
  bool disable_ignore_eos = false;
  std::string result_filename;
};

int run_bench_offline(BenchOfflineArgs a) {
  if (a.engine.model_path.empty()) default_to_builtin_model(a.engine);
  std::unique_ptr<Engine> engine = create_engine(a.engine);
  const std::vector<BenchRequest> reqs =
      make_bench_requests(a.data, engine->tokenizer(), engine->model_config().vocab_size);
  int64_t input_tokens = 0;
  for (const BenchRequest& r : reqs) input_tokens += static_cast<int64_t>(r.input_ids.size());
  engine->start();

  struct Track {
    std::shared_ptr<RequestStream> stream;
    double ttft = -1.0, latency = -1.0;
    int output = 0;
    bool done = false;
    std::string error;
  };
  std::vector<Track> tracks(reqs.size());
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (size_t i = 0; i < reqs.size(); ++i) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_new_tokens = reqs[i].output_len;
    p.ignore_eos = !a.disable_ignore_eos;
    tracks[i].stream = engine->submit(reqs[i].input_ids, p);
  }
  size_t remaining = tracks.size();
  while (remaining > 0) {
    bool progressed = false;
    for (Track& t : tracks) {
      if (t.done) continue;
      while (std::optional<OutputEvent> ev = t.stream->next(std::chrono::milliseconds(0))) {
        progressed = true;
        if (!ev->new_ids.empty() && t.ttft < 0.0) t.ttft = since();
        t.output += static_cast<int>(ev->new_ids.size());
        if (ev->finished) {
          t.done = true;
          t.latency = since();
          t.error = ev->error;
          --remaining;
          break;
        }
      }
    }
    if (!progressed) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const double duration = since();
  const SchedulerStats st = engine->stats();
  engine->shutdown(true);

  std::vector<double> ttft, latency;
  int64_t output_tokens = 0;
  int ok = 0;
  for (const Track& t : tracks) {
    if (!t.error.empty()) continue;
    ++ok;
    output_tokens += t.output;
    latency.push_back(t.latency);
    if (t.ttft >= 0.0) ttft.push_back(t.ttft);
  }
  nlohmann::json j = {{"command", invoked_command_line()},
                      {"git_hash", git_hash()},
                      {"date", utc_now()},
                      {"device", engine->backend().device_description()},
                      {"backend", "serve8-offline"},
                      {"dataset_name", a.data.name},
                      {"num_prompts", static_cast<int>(reqs.size())},
                      {"kv_cache_dtype", dtype_name(engine->kv_config().dtype)},
                      {"max_total_num_tokens", engine->kv_config().num_slots - 1},
                      {"peak_running_requests", st.peak_running},
                      {"num_retractions", st.num_retractions},
                      {"successful_requests", ok},
                      {"duration", duration},
                      {"total_input_tokens", input_tokens},
                      {"total_output_tokens", output_tokens},
                      {"request_throughput", ok / duration},
                      {"input_throughput", static_cast<double>(input_tokens) / duration},
                      {"output_throughput", static_cast<double>(output_tokens) / duration},
                      {"total_throughput", static_cast<double>(input_tokens + output_tokens) / duration},
                      {"mean_ttft_ms", 1e3 * mean(ttft)},
                      {"median_ttft_ms", 1e3 * percentile(ttft, 50)},
                      {"p99_ttft_ms", 1e3 * percentile(ttft, 99)},
                      {"mean_e2e_latency_ms", 1e3 * mean(latency)},
                      {"median_e2e_latency_ms", 1e3 * percentile(latency, 50)}};
  fmt::print("{:=^50}\n", " Offline Throughput Benchmark Result ");
  fmt::print("{:<40}{:<10}\n", "Backend:", "serve8 (in process)");
  fmt::print("{:<40}{:<10}\n", "Successful requests:", ok);
  fmt::print("{:<40}{:<10.2f}\n", "Benchmark duration (s):", duration);
  fmt::print("{:<40}{:<10}\n", "Total input tokens:", input_tokens);
  fmt::print("{:<40}{:<10}\n", "Total generated tokens:", output_tokens);
  fmt::print("{:<40}{:<10.2f}\n", "Request throughput (req/s):", ok / duration);
  fmt::print("{:<40}{:<10.2f}\n", "Input token throughput (tok/s):", static_cast<double>(input_tokens) / duration);
  fmt::print("{:<40}{:<10.2f}\n", "Output token throughput (tok/s):", static_cast<double>(output_tokens) / duration);
  fmt::print("{:<40}{:<10.2f}\n",
             "Total token throughput (tok/s):", static_cast<double>(input_tokens + output_tokens) / duration);
  fmt::print("{:<40}{:<10.2f}\n", "Mean TTFT (ms):", 1e3 * mean(ttft));
  fmt::print("{:<40}{:<10.2f}\n", "Mean E2E latency (ms):", 1e3 * mean(latency));
  fmt::print("{:<40}{:<10}\n", "KV pool (tokens):", engine->kv_config().num_slots - 1);
  fmt::print("{:<40}{:<10}\n", "Peak running requests:", st.peak_running);
  fmt::print("{:<40}{:<10}\n", "Retractions:", st.num_retractions);
  fmt::print("{:=^50}\n", "");
  if (!a.result_filename.empty()) {
    std::ofstream out(a.result_filename, std::ios::app);
    SERVE8_CHECK(out.good(), "bench-offline: cannot open {} for appending", a.result_filename);
    out << j.dump() << "\n";
  }
  SERVE8_CHECK(ok == static_cast<int>(reqs.size()), "bench-offline: {} of {} requests failed", reqs.size() - ok,
               reqs.size());
  return 0;
}

}  // namespace

void add_dataset_options(CLI::App& app, BenchDatasetOptions& d) {
  app.add_option("--dataset-name", d.name, "sharegpt | random | random-ids");
  app.add_option("--dataset-path", d.path,
                 "ShareGPT JSON (e.g. ../shared/data/sharegpt/ShareGPT_V3_filtered_500.json)");
  app.add_option("--num-prompts", d.num_prompts, "requests to send (ShareGPT prompts are cycled)");
  app.add_option("--random-input-len", d.random_input_len);
  app.add_option("--random-output-len", d.random_output_len);
  app.add_option("--random-range-ratio", d.random_range_ratio, "lengths uniform in [len * ratio, len]");
  app.add_option("--sharegpt-output-len", d.sharegpt_output_len, "fixed output length (default: uniform in [1, 512])");
  app.add_option("--seed", d.seed, "seed of the dataset's random choices");
}

void register_bench_offline(CLI::App& root, SetAction set_action) {
  auto a = std::make_shared<BenchOfflineArgs>();
  CLI::App* app = root.add_subcommand("bench-offline", "throughput of the engine in process, no HTTP");
  add_engine_options(*app, a->engine);
  add_dataset_options(*app, a->data);
  app->add_flag("--disable-ignore-eos", a->disable_ignore_eos, "stop at EOS (default: run every output to its length)");
  app->add_option("--result-filename", a->result_filename, "append one JSON line of results here");
  app->callback([a, set_action] { set_action([a] { return run_bench_offline(*a); }); });
}

}  // namespace serve8
