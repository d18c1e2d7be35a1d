// `serve8 eval gsm8k` and `serve8 eval mmlu`: few-shot benchmarks sent to a running server's
// /generate (serve8, or SGLang: the same route), with SGLang's benchmark scripts' prompts and
// answer extraction: gsm8k takes the last number of the completion, MMLU the answer letter.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace serve8 {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

struct ServerEvalArgs {
  std::string host = "127.0.0.1";
  int port = 30000;
  int parallel = 16;
  std::string output_file;
  // gsm8k
  std::string data_path;
  int num_questions = 200;
  int num_shots = 5;
  int max_new_tokens = 256;
  // mmlu
  std::string data_dir;
  int nsub = 60;
  int ntrain = 5;
};

struct Item {
  std::string prompt;
  std::string label;  // gsm8k: the number; mmlu: the letter
};

std::vector<Json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  SERVE8_CHECK(in.good(), "eval gsm8k: cannot read {}", path);
  std::vector<Json> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    Json j = Json::parse(line, nullptr, false);
    SERVE8_CHECK(!j.is_discarded() && j.contains("question") && j.contains("answer"),
                 "{}:{}: expected {{\"question\", \"answer\"}}", path, n);
    out.push_back(std::move(j));
  }
  return out;
}

// The last number in a text, commas dropped ("1,234" -> "1234"); empty if none (SGLang's
// get_answer_value; "invalid" then).
std::string last_number(const std::string& text) {
  static const std::regex num(R"(-?[0-9][0-9,]*\.?[0-9]*)");
  std::string last;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), num); it != std::sregex_iterator(); ++it)
    last = it->str();
  last.erase(std::remove(last.begin(), last.end(), ','), last.end());
  while (!last.empty() && last.back() == '.') last.pop_back();
  return last;
}

std::string gsm8k_label(const std::string& answer) {
  const size_t at = answer.rfind("####");
  return last_number(at == std::string::npos ? answer : answer.substr(at + 4));
}

// One CSV record per line (MMLU's files quote fields that hold commas or quotes).
std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::ifstream in(path);
  SERVE8_CHECK(in.good(), "eval mmlu: cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quoted) {
      if (c == '"' && i + 1 < s.size() && s[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      rows.back().push_back(std::move(field));
      field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  if (!field.empty() || !rows.back().empty()) rows.back().push_back(std::move(field));
  std::erase_if(rows, [](const auto& r) { return r.empty() || (r.size() == 1 && r[0].empty()); });
  for (const auto& r : rows)
    SERVE8_CHECK(r.size() == 6, "{}: a row has {} fields, expected 6 (question, A, B, C, D, answer)", path, r.size());
  return rows;
}

std::string mmlu_question(const std::vector<std::string>& r, bool with_answer) {
  std::string q = r[0];
  // One piece at a time: GCC 12 warns (-Wrestrict, falsely) on the chained temporaries.
  for (int k = 0; k < 4; ++k) {
    q += '\n';
    q += static_cast<char>('A' + k);
    q += ". ";
    q += r[static_cast<size_t>(k + 1)];
  }
  q += "\nAnswer:";
  if (with_answer) {
    q += ' ';
    q += r[5];
    q += "\n\n";
  }
  return q;
}

struct Result {
  std::vector<std::string> preds;
  double latency = 0.0;
  int64_t output_tokens = 0;
};

// Sends every prompt to /generate (greedy) from `parallel` threads; preds[i] is the completion.
Result run_prompts(const ServerEvalArgs& a, const std::vector<Item>& items, int max_new_tokens,
                   const std::vector<std::string>& stop) {
  Result r;
  r.preds.resize(items.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string first_error;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int w = 0; w < std::max(1, a.parallel); ++w) {
    pool.emplace_back([&] {
      httplib::Client cli(a.host, a.port);
      cli.set_read_timeout(3600, 0);
      for (size_t i; (i = next++) < items.size();) {
        const Json body = {
            {"text", items[i].prompt},
            {"sampling_params", {{"temperature", 0.0}, {"max_new_tokens", max_new_tokens}, {"stop", stop}}}};
        const httplib::Result res = cli.Post("/generate", body.dump(), "application/json");
        std::lock_guard<std::mutex> lock(mu);
        if (!res || res->status != 200) {
          if (first_error.empty())
            first_error = res ? "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200)
                              : httplib::to_string(res.error());
          continue;
        }
        const Json j = Json::parse(res->body, nullptr, false);
        r.preds[i] = j.value("text", "");
        if (j.contains("meta_info")) r.output_tokens += j["meta_info"].value("completion_tokens", 0);
      }
    });
  }
  for (auto& t : pool) t.join();
  r.latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  SERVE8_CHECK(first_error.empty(), "eval: a request to http://{}:{}/generate failed: {}", a.host, a.port, first_error);
  return r;
}

void report(const ServerEvalArgs& a, const std::string& task, size_t n, int correct, int invalid, const Result& r) {
  const double acc = static_cast<double>(correct) / static_cast<double>(n);
  fmt::print("{}: {} questions, accuracy {:.3f}, invalid {:.3f}, latency {:.3f} s, output throughput {:.1f} token/s\n",
             task, n, acc, static_cast<double>(invalid) / static_cast<double>(n), r.latency,
             static_cast<double>(r.output_tokens) / r.latency);
  if (a.output_file.empty()) return;
  std::ofstream out(a.output_file, std::ios::app);
  SERVE8_CHECK(out.good(), "eval {}: cannot open {} for appending", task, a.output_file);
  out << Json{{"task", task},
              {"command", invoked_command_line()},
              {"num_questions", n},
              {"accuracy", acc},
              {"invalid", static_cast<double>(invalid) / static_cast<double>(n)},
              {"latency_s", r.latency},
              {"output_throughput", static_cast<double>(r.output_tokens) / r.latency}}
             .dump()
      << "\n";
}

int run_gsm8k(const ServerEvalArgs& a) {
  const std::string dir = a.data_path.empty() ? "../shared/data/gsm8k" : a.data_path;
  const std::vector<Json> train = read_jsonl(dir + "/train.jsonl"), test = read_jsonl(dir + "/test.jsonl");
  SERVE8_CHECK(a.num_shots >= 0 && static_cast<size_t>(a.num_shots) <= train.size(), "eval gsm8k: --num-shots {}",
               a.num_shots);
  std::string shots;
  for (int i = 0; i < a.num_shots; ++i)
    shots += "Question: " + train[static_cast<size_t>(i)]["question"].get<std::string>() +
             "\nAnswer: " + train[static_cast<size_t>(i)]["answer"].get<std::string>() + "\n\n";
  std::vector<Item> items;
  for (size_t i = 0; i < std::min(test.size(), static_cast<size_t>(std::max(a.num_questions, 1))); ++i)
    items.push_back({shots + "Question: " + test[i]["question"].get<std::string>() + "\nAnswer:",
                     gsm8k_label(test[i]["answer"].get<std::string>())});
  const Result r = run_prompts(a, items, a.max_new_tokens, {"Question", "Assistant:", "<|separator|>"});
  int correct = 0, invalid = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string p = last_number(r.preds[i]);
    invalid += p.empty();
    correct += !p.empty() && p == items[i].label;
  }
  report(a, "gsm8k", items.size(), correct, invalid, r);
  return 0;
}

int run_mmlu(const ServerEvalArgs& a) {
  SERVE8_CHECK(!a.data_dir.empty(), "eval mmlu: --data-dir DIR (with dev/ and test/ CSV files) is required");
  std::vector<std::string> subjects;
  for (const auto& f : fs::directory_iterator(fs::path(a.data_dir) / "test")) {
    const std::string name = f.path().filename().string();
    if (name.size() > 9 && name.ends_with("_test.csv")) subjects.push_back(name.substr(0, name.size() - 9));
  }
  std::sort(subjects.begin(), subjects.end());
  SERVE8_CHECK(!subjects.empty(), "eval mmlu: {}/test has no <subject>_test.csv", a.data_dir);
  if (a.nsub > 0 && static_cast<int>(subjects.size()) > a.nsub) subjects.resize(static_cast<size_t>(a.nsub));
  std::vector<Item> items;
  for (const std::string& s : subjects) {
    const auto dev = read_csv(a.data_dir + "/dev/" + s + "_dev.csv");
    const auto test = read_csv(a.data_dir + "/test/" + s + "_test.csv");
    std::string subject = s;
    std::replace(subject.begin(), subject.end(), '_', ' ');
    std::string head = "The following are multiple choice questions (with answers) about " + subject + ".\n\n";
    for (size_t k = 0; k < std::min(dev.size(), static_cast<size_t>(a.ntrain)); ++k)
      head += mmlu_question(dev[k], true);
    for (const auto& q : test) items.push_back({head + mmlu_question(q, false), q[5]});
  }
  const Result r = run_prompts(a, items, 1, {});
  int correct = 0, invalid = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    std::string p = r.preds[i];
    p.erase(0, p.find_first_not_of(' '));
    const std::string letter = p.empty() ? "" : p.substr(0, 1);
    invalid += letter.empty() || letter[0] < 'A' || letter[0] > 'D';
    correct += letter == items[i].label;
  }
  report(a, "mmlu", items.size(), correct, invalid, r);
  return 0;
}

void add_server_options(CLI::App& app, ServerEvalArgs& a) {
  app.add_option("--host", a.host);
  app.add_option("--port", a.port);
  app.add_option("--parallel", a.parallel, "requests in flight");
  app.add_option("--output-file", a.output_file, "append one JSON line of results here");
}

}  // namespace

void register_eval_server(CLI::App& eval, SetAction set_action) {
  auto a = std::make_shared<ServerEvalArgs>();
  CLI::App* g = eval.add_subcommand("gsm8k", "few-shot gsm8k against a running server (SGLang's bench_sglang)");
  add_server_options(*g, *a);
  g->add_option("--data-path", a->data_path, "folder with train.jsonl and test.jsonl (default: ../shared/data/gsm8k)");
  g->add_option("--num-questions", a->num_questions);
  g->add_option("--num-shots", a->num_shots);
  g->add_option("--max-new-tokens", a->max_new_tokens);
  g->callback([a, set_action] { set_action([a] { return run_gsm8k(*a); }); });
  CLI::App* m = eval.add_subcommand("mmlu", "few-shot MMLU against a running server (SGLang's bench_sglang)");
  add_server_options(*m, *a);
  m->add_option("--data-dir", a->data_dir, "MMLU folder: dev/<subject>_dev.csv and test/<subject>_test.csv");
  m->add_option("--nsub", a->nsub, "number of subjects");
  m->add_option("--ntrain", a->ntrain, "examples per prompt");
  m->callback([a, set_action] { set_action([a] { return run_mmlu(*a); }); });
}

}  // namespace serve8
