// `serve8 bench-serving`: SGLang's bench_serving against any server of the same HTTP contract
// (serve8, SGLang, vLLM): requests from a dataset (bench_dataset.h) arrive as a Poisson process at
// --request-rate (inf: all at once), at most --max-concurrency in flight, each streamed; per
// request the client records time to first token, the gaps between streamed chunks and the
// end-to-end latency. The summary has SGLang's layout; --output-file appends one JSON line with
// every metric and the arguments.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/bench_dataset.h"
#include "cli/bench_stats.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

namespace {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

struct BenchServingArgs {
  std::string backend = "sglang";  // sglang | openai | openai-chat
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string base_url;
  std::string model;
  std::string tokenizer;
  BenchDatasetOptions data;
  double request_rate = std::numeric_limits<double>::infinity();
  int max_concurrency = 0;  // 0: unlimited
  bool disable_stream = false;
  bool disable_ignore_eos = false;
  int warmup_requests = 1;
  std::string output_file;
  std::string request_rate_text = "inf";
  std::string api_key;
};

struct Outcome {
  bool ok = false;
  std::string error;
  double ttft = 0.0, latency = 0.0;
  std::vector<double> itl;  // gaps between content chunks
  int output_tokens = 0;
  int prompt_tokens = 0;
};

// The request body of each backend, and how to read the text out of a streamed (or whole) reply.
std::string request_path(const std::string& backend) {
  if (backend == "sglang") return "/generate";
  if (backend == "openai") return "/v1/completions";
  return "/v1/chat/completions";
}

Json request_body(const BenchServingArgs& a, const BenchRequest& r) {
  const bool stream = !a.disable_stream;
  const bool ignore_eos = !a.disable_ignore_eos;
  if (a.backend == "sglang") {
    Json j = {{"sampling_params", {{"max_new_tokens", r.output_len}, {"temperature", 0.0}, {"ignore_eos", ignore_eos}}},
              {"stream", stream}};
    if (r.text.empty()) {
      j["input_ids"] = r.input_ids;
    } else {
      j["text"] = r.text;
    }
    return j;
  }
  Json j = {{"model", a.model},
            {"max_tokens", r.output_len},
            {"temperature", 0.0},
            {"ignore_eos", ignore_eos},
            {"stream", stream}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  if (a.backend == "openai") {
    if (r.text.empty()) {
      j["prompt"] = r.input_ids;
    } else {
      j["prompt"] = r.text;
    }
  } else {
    j["messages"] = Json::array({{{"role", "user"}, {"content", r.text}}});
  }
  return j;
}

// The new text of one JSON payload, and token counts where the server reports them.
struct Chunk {
  std::string text;
  int completion_tokens = -1, prompt_tokens = -1;
};

Chunk parse_payload(const std::string& backend, const Json& j, const std::string& text_so_far) {
  Chunk c;
  if (backend == "sglang") {
    const std::string full = j.value("text", "");  // cumulative
    c.text = full.size() >= text_so_far.size() ? full.substr(text_so_far.size()) : "";
    if (j.contains("meta_info")) {
      c.completion_tokens = j["meta_info"].value("completion_tokens", -1);
      c.prompt_tokens = j["meta_info"].value("prompt_tokens", -1);
    }
    return c;
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const Json& ch = j["choices"][0];
    if (ch.contains("text") && ch["text"].is_string()) c.text = ch["text"].get<std::string>();
    for (const char* key : {"delta", "message"})
      if (ch.contains(key) && ch[key].is_object() && ch[key].contains("content") && ch[key]["content"].is_string())
        c.text = ch[key]["content"].get<std::string>();
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    c.completion_tokens = j["usage"].value("completion_tokens", -1);
    c.prompt_tokens = j["usage"].value("prompt_tokens", -1);
  }
  return c;
}

Outcome send_one(const BenchServingArgs& a, const std::string& url, const BenchRequest& r, const Tokenizer* tok) {
  Outcome out;
  httplib::Client cli(url);
  cli.set_read_timeout(3600, 0);
  cli.set_connection_timeout(30, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = request_path(a.backend);
  req.headers = {{"Content-Type", "application/json"}};
  if (!a.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + a.api_key);
  req.body = request_body(a, r).dump();
  std::string pending, text, whole;
  int completion = -1;
  const auto t0 = SteadyClock::now();
  double last = -1.0;
  auto now = [&t0] { return std::chrono::duration<double>(SteadyClock::now() - t0).count(); };
  auto on_payload = [&](const std::string& data) {
    if (data == "[DONE]") return;
    const Json j = Json::parse(data, nullptr, false);
    if (j.is_discarded()) return;
    const Chunk c = parse_payload(a.backend, j, text);
    // SGLang's chunks count their tokens (meta_info.completion_tokens, cumulative): a chunk that
    // adds tokens is an arrival even without new text (an id outside the tokenizer's vocabulary, as
    // a Llama-3 config with the Llama-2 tokenizer and dummy weights makes, or the first bytes of an
    // unfinished character), and a gap shared by n tokens counts n times gap / n, as SGLang's client.
    const int new_tokens =
        a.backend == "sglang" && c.completion_tokens >= 0 ? c.completion_tokens - std::max(completion, 0) : -1;
    if (c.completion_tokens >= 0) completion = c.completion_tokens;
    if (c.prompt_tokens >= 0) out.prompt_tokens = c.prompt_tokens;
    if (new_tokens == 0 || (new_tokens < 0 && c.text.empty())) {
      text += c.text;
      return;
    }
    const double t = now();
    if (last < 0.0) {
      out.ttft = t;
    } else {
      const int n = std::max(new_tokens, 1);
      for (int k = 0; k < n; ++k) out.itl.push_back((t - last) / n);
    }
    last = t;
    text += c.text;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (a.disable_stream) {
      whole.append(data, n);
      return true;
    }
    pending.append(data, n);
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) on_payload(line.substr(line.find_first_not_of(' ', 5)));
    }
    return true;
  };
  const httplib::Result res = cli.send(req);
  out.latency = now();
  if (!res) {
    out.error = httplib::to_string(res.error());
    return out;
  }
  if (res->status != 200) {
    out.error = "HTTP " + std::to_string(res->status) + ": " + (a.disable_stream ? whole : pending).substr(0, 300);
    return out;
  }
  if (a.disable_stream) on_payload(whole);
  out.output_tokens = completion >= 0 ? completion : (tok ? static_cast<int>(tok->encode(text, false).size()) : 0);
  if (out.prompt_tokens == 0) out.prompt_tokens = static_cast<int>(r.input_ids.size());
  if (a.disable_stream) out.ttft = out.latency;  // no stream: the first token arrives with the last
  out.ok = true;
  return out;
}

int run_bench_serving(BenchServingArgs a) {
  SERVE8_CHECK(a.backend == "sglang" || a.backend == "openai" || a.backend == "openai-chat",
               "--backend {}: expected sglang, openai or openai-chat", a.backend);
  if (a.request_rate_text != "inf") {
    a.request_rate = std::strtod(a.request_rate_text.c_str(), nullptr);
    SERVE8_CHECK(a.request_rate > 0.0, "--request-rate {}: expected a positive number or inf", a.request_rate_text);
  }
  const std::string url = a.base_url.empty() ? "http://" + a.host + ":" + std::to_string(a.port) : a.base_url;
  // The served model's name and vocabulary, from the server itself.
  {
    httplib::Client cli(url);
    const httplib::Result r = cli.Get("/v1/models");
    SERVE8_CHECK(r && r->status == 200, "bench-serving: {}/v1/models did not answer ({})", url,
                 r ? "HTTP " + std::to_string(r->status) : httplib::to_string(r.error()));
    const Json j = Json::parse(r->body, nullptr, false);
    if (a.model.empty() && !j.is_discarded() && j.contains("data") && !j["data"].empty())
      a.model = j["data"][0].value("id", "");
  }
  std::unique_ptr<Tokenizer> tok;
  if (!a.tokenizer.empty()) tok = load_tokenizer(a.tokenizer);
  SERVE8_CHECK(tok || a.data.name == "random-ids",
               "bench-serving: --dataset-name {} needs --tokenizer (the model's tokenizer directory)", a.data.name);
  SERVE8_CHECK(a.data.name != "random-ids" || a.backend != "openai-chat",
               "bench-serving: --dataset-name random-ids sends token ids, which openai-chat cannot");
  const int vocab = tok ? tok->vocab_size() : 512;
  const std::vector<BenchRequest> reqs = make_bench_requests(a.data, tok.get(), vocab);

  for (int i = 0; i < a.warmup_requests; ++i) {
    BenchRequest w = reqs[static_cast<size_t>(i) % reqs.size()];
    w.output_len = std::min(w.output_len, 16);
    const Outcome o = send_one(a, url, w, tok.get());
    SERVE8_CHECK(o.ok, "bench-serving: the warm-up request failed: {}", o.error);
  }

  std::vector<Outcome> outcomes(reqs.size());
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, done = 0;
  std::vector<std::thread> threads;
  std::mt19937_64 rng(a.data.seed);
  std::exponential_distribution<double> gap(std::isinf(a.request_rate) ? 1.0 : a.request_rate);
  const auto t0 = SteadyClock::now();
  double next_at = 0.0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!std::isinf(a.request_rate)) {
      std::this_thread::sleep_until(
          t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(next_at)));
      next_at += gap(rng);
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return a.max_concurrency <= 0 || in_flight < a.max_concurrency; });
      ++in_flight;
    }
    threads.emplace_back([&, i] {
      outcomes[i] = send_one(a, url, reqs[i], tok.get());
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      ++done;
      std::fprintf(stderr, "\r[%-40s] %d/%zu", std::string(static_cast<size_t>(40 * done / reqs.size()), '#').c_str(),
                   done, reqs.size());
      cv.notify_all();
    });
  }
  for (std::thread& t : threads) t.join();
  std::fprintf(stderr, "\n");
  const double duration = std::chrono::duration<double>(SteadyClock::now() - t0).count();

  int ok = 0;
  int64_t in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, itl, tpot, e2e;
  std::string first_error;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      if (first_error.empty()) first_error = o.error;
      continue;
    }
    ++ok;
    in_tokens += o.prompt_tokens;
    out_tokens += o.output_tokens;
    ttft.push_back(o.ttft * 1e3);
    e2e.push_back(o.latency * 1e3);
    for (double g : o.itl) itl.push_back(g * 1e3);
    if (o.output_tokens > 1) tpot.push_back((o.latency - o.ttft) * 1e3 / (o.output_tokens - 1));
  }
  double sum_e2e = 0.0;
  for (double x : e2e) sum_e2e += x / 1e3;
  Json j = {{"backend", a.backend},
            {"base_url", url},
            {"model", a.model},
            {"dataset_name", a.data.name},
            {"num_prompts", static_cast<int>(reqs.size())},
            {"request_rate", a.request_rate_text},
            {"max_concurrency", a.max_concurrency},
            {"command", invoked_command_line()},
            {"completed", ok},
            {"duration", duration},
            {"total_input_tokens", in_tokens},
            {"total_output_tokens", out_tokens},
            {"request_throughput", ok / duration},
            {"input_throughput", static_cast<double>(in_tokens) / duration},
            {"output_throughput", static_cast<double>(out_tokens) / duration},
            {"total_throughput", static_cast<double>(in_tokens + out_tokens) / duration},
            {"concurrency", sum_e2e / duration},
            {"mean_e2e_latency_ms", mean(e2e)},
            {"median_e2e_latency_ms", percentile(e2e, 50)},
            {"mean_ttft_ms", mean(ttft)},
            {"median_ttft_ms", percentile(ttft, 50)},
            {"p99_ttft_ms", percentile(ttft, 99)},
            {"mean_itl_ms", mean(itl)},
            {"median_itl_ms", percentile(itl, 50)},
            {"p95_itl_ms", percentile(itl, 95)},
            {"p99_itl_ms", percentile(itl, 99)},
            {"max_itl_ms", itl.empty() ? 0.0 : *std::max_element(itl.begin(), itl.end())},
            {"mean_tpot_ms", mean(tpot)},
            {"median_tpot_ms", percentile(tpot, 50)},
            {"p99_tpot_ms", percentile(tpot, 99)}};
  auto line = [](const char* k, const std::string& v) { fmt::print("{:<40}{:<10}\n", k, v); };
  auto num = [](double v) { return fmt::format("{:.2f}", v); };
  fmt::print("\n{:=^50}\n", " Serving Benchmark Result ");
  line("Backend:", a.backend);
  line("Traffic request rate:", a.request_rate_text);
  line("Max request concurrency:", a.max_concurrency > 0 ? std::to_string(a.max_concurrency) : "not set");
  line("Successful requests:", std::to_string(ok));
  line("Benchmark duration (s):", num(duration));
  line("Total input tokens:", std::to_string(in_tokens));
  line("Total generated tokens:", std::to_string(out_tokens));
  line("Request throughput (req/s):", num(ok / duration));
  line("Input token throughput (tok/s):", num(static_cast<double>(in_tokens) / duration));
  line("Output token throughput (tok/s):", num(static_cast<double>(out_tokens) / duration));
  line("Total token throughput (tok/s):", num(static_cast<double>(in_tokens + out_tokens) / duration));
  line("Concurrency:", num(sum_e2e / duration));
  fmt::print("{:-^50}\n", "End-to-End Latency");
  line("Mean E2E Latency (ms):", num(mean(e2e)));
  line("Median E2E Latency (ms):", num(percentile(e2e, 50)));
  fmt::print("{:-^50}\n", "Time to First Token");
  line("Mean TTFT (ms):", num(mean(ttft)));
  line("Median TTFT (ms):", num(percentile(ttft, 50)));
  line("P99 TTFT (ms):", num(percentile(ttft, 99)));
  fmt::print("{:-^50}\n", "Inter-Token Latency");
  line("Mean ITL (ms):", num(mean(itl)));
  line("Median ITL (ms):", num(percentile(itl, 50)));
  line("P95 ITL (ms):", num(percentile(itl, 95)));
  line("P99 ITL (ms):", num(percentile(itl, 99)));
  line("Max ITL (ms):", num(itl.empty() ? 0.0 : *std::max_element(itl.begin(), itl.end())));
  fmt::print("{:-^50}\n", "Time per Output Token (excl. 1st token)");
  line("Mean TPOT (ms):", num(mean(tpot)));
  line("Median TPOT (ms):", num(percentile(tpot, 50)));
  line("P99 TPOT (ms):", num(percentile(tpot, 99)));
  fmt::print("{:=^50}\n", "");
  if (!a.output_file.empty()) {
    std::ofstream out(a.output_file, std::ios::app);
    SERVE8_CHECK(out.good(), "bench-serving: cannot open {} for appending", a.output_file);
    out << j.dump() << "\n";
  }
  SERVE8_CHECK(ok == static_cast<int>(reqs.size()), "bench-serving: {} of {} requests failed; the first: {}",
               reqs.size() - static_cast<size_t>(ok), reqs.size(), first_error);
  return 0;
}

}  // namespace

void register_bench_serving(CLI::App& root, SetAction set_action) {
  auto a = std::make_shared<BenchServingArgs>();
  CLI::App* app = root.add_subcommand("bench-serving", "SGLang's bench_serving against a running server");
  app->add_option("--backend", a->backend, "sglang | openai | openai-chat");
  app->add_option("--host", a->host);
  app->add_option("--port", a->port);
  app->add_option("--base-url", a->base_url, "instead of --host/--port, e.g. http://127.0.0.1:30000");
  app->add_option("--model", a->model, "model name for the OpenAI APIs (default: the server's first)");
  // SGLang's bench_serving sends $OPENAI_API_KEY; the flag wins over it.
  app->add_option("--api-key", a->api_key, "bearer token for a server started with --api-key")
      ->envname("OPENAI_API_KEY");
  app->add_option("--tokenizer", a->tokenizer, "tokenizer directory or file (prompts as text, output token counts)");
  add_dataset_options(*app, a->data);
  app->add_option("--request-rate", a->request_rate_text, "requests per second, Poisson arrivals; inf: all at once");
  app->add_option("--max-concurrency", a->max_concurrency, "most requests in flight (default: no limit)");
  app->add_flag("--disable-stream", a->disable_stream, "ask for whole replies (TTFT = latency)");
  app->add_flag("--disable-ignore-eos", a->disable_ignore_eos, "let requests stop at EOS");
  app->add_option("--warmup-requests", a->warmup_requests, "requests sent (and not counted) before the run");
  app->add_option("--output-file", a->output_file, "append one JSON line with every metric and the arguments");
  app->callback([a, set_action] { set_action([a] { return run_bench_serving(*a); }); });
}

}  // namespace serve8
