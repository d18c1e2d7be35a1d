// `serve8 dump-logits`: the logits serve8 computes for a batch of prompts, for comparison with
// another implementation (scripts/hf_compare.py checks them against HF transformers). All prompts
// run as one batch: their first len - D tokens as a prefill step, their last D tokens one per
// decode step (teacher forcing, so prefill and decode kernels are both covered), then G greedy
// decode steps. Writes PREFIX.npy, fp32 [prompts, D + 1, vocab] (the logits at positions
// len-D-1 .. len-1), and PREFIX.json (the positions and each prompt's G greedy ids).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/token_input.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/direct_batch.h"

namespace serve8 {

namespace {

struct DumpLogitsArgs {
  EngineArgs engine;
  std::string prompts_file;
  int decode_tokens = 8;
  int greedy_tokens = 32;
  std::string output;
};

// A NumPy .npy file (format 1.0) of little-endian fp32.
void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<size_t>& shape) {
  std::string dims;
  for (size_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  SERVE8_CHECK(out.good(), "dump-logits: cannot write {}", path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
}

int run_dump_logits(const DumpLogitsArgs& a) {
  const std::vector<std::vector<int32_t>> prompts = read_id_lines(a.prompts_file);
  SERVE8_CHECK(!prompts.empty(), "dump-logits: {} holds no prompts", a.prompts_file);
  const int n = static_cast<int>(prompts.size());
  const int d = a.decode_tokens;
  SERVE8_CHECK(d >= 0 && a.greedy_tokens >= 0, "dump-logits: --decode-tokens and --greedy-tokens must be >= 0");
  size_t longest = 0;
  for (const auto& p : prompts) {
    SERVE8_CHECK(static_cast<int>(p.size()) > d,
                 "dump-logits: a prompt of {} tokens is not longer than --decode-tokens {}", p.size(), d);
    longest = std::max(longest, p.size());
  }
  EngineArgs ea = a.engine;
  ea.scheduler.max_running_requests = std::max(ea.scheduler.max_running_requests, n);
  EngineParts e = create_engine_parts(ea);
  LlamaModel& model = *e.model;
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  for (const auto& p : prompts)
    for (int32_t t : p)
      SERVE8_CHECK(t >= 0 && static_cast<size_t>(t) < vocab, "dump-logits: token id {} is outside the vocabulary of {}",
                   t, vocab);
  const std::vector<int32_t> first = first_slots(n, static_cast<int>(longest) + a.greedy_tokens + 1, *e.kv);

  std::vector<std::vector<int32_t>> heads(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) heads[i].assign(prompts[i].begin(), prompts[i].end() - d);
  const int budget = std::max<int>(e.scheduler.max_prefill_tokens, 1);
  std::vector<std::vector<float>> last = prefill(model, *e.kv, heads, first, budget, model.max_seqs(), true);

  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(d + 1) * vocab);
  auto row = [&](int i, int j) {
    return logits.data() + (static_cast<size_t>(i) * static_cast<size_t>(d + 1) + static_cast<size_t>(j)) * vocab;
  };
  for (int i = 0; i < n; ++i)
    std::copy(last[static_cast<size_t>(i)].begin(), last[static_cast<size_t>(i)].end(), row(i, 0));

  std::vector<int32_t> tokens(static_cast<size_t>(n)), positions(static_cast<size_t>(n));
  ForwardBatch scratch;
  Tensor out;
  for (int j = 0; j < d; ++j) {
    for (int i = 0; i < n; ++i) {
      const auto& p = prompts[static_cast<size_t>(i)];
      positions[static_cast<size_t>(i)] = static_cast<int32_t>(p.size()) - d + j;
      tokens[static_cast<size_t>(i)] = p[static_cast<size_t>(positions[static_cast<size_t>(i)])];
    }
    out = decode_step(model, *e.kv, scratch, tokens, positions, first);
    for (int i = 0; i < n; ++i) model.backend().copy_to_host(row(i, j + 1), out.rows(i, 1).data, vocab * sizeof(float));
  }

  // Greedy continuation from the logits at each prompt's last position.
  std::vector<std::vector<int32_t>> greedy(prompts.size());
  std::vector<SamplingRow> argmax(static_cast<size_t>(n));
  for (int g = 0; g < a.greedy_tokens; ++g) {
    if (g == 0) {
      for (int i = 0; i < n; ++i) {  // the argmax of the rows already on the host, lowest id on ties
        const float* r = row(i, d);
        tokens[static_cast<size_t>(i)] = static_cast<int32_t>(std::max_element(r, r + vocab) - r);
      }
    } else {
      model.backend().sample(out, argmax, tokens.data());
    }
    for (int i = 0; i < n; ++i) {
      greedy[static_cast<size_t>(i)].push_back(tokens[static_cast<size_t>(i)]);
      positions[static_cast<size_t>(i)] = static_cast<int32_t>(prompts[static_cast<size_t>(i)].size()) + g;
    }
    if (g + 1 < a.greedy_tokens) out = decode_step(model, *e.kv, scratch, tokens, positions, first);
  }

  write_npy(a.output + ".npy", logits, {static_cast<size_t>(n), static_cast<size_t>(d + 1), vocab});
  nlohmann::json j = {{"command", invoked_command_line()},
                      {"device", e.backend->device_description()},
                      {"kv_cache_dtype", dtype_name(e.kv->config().dtype)},
                      {"prompts", nlohmann::json::array()}};
  for (int i = 0; i < n; ++i) {
    const int len = static_cast<int>(prompts[static_cast<size_t>(i)].size());
    std::vector<int> pos;
    for (int p = len - d - 1; p < len; ++p) pos.push_back(p);
    j["prompts"].push_back({{"len", len}, {"positions", pos}, {"greedy_ids", greedy[static_cast<size_t>(i)]}});
  }
  std::ofstream(a.output + ".json") << j.dump(1) << "\n";
  spdlog::info("dump-logits: {} prompts, {} logit rows each, {} greedy ids each -> {}.npy / .json", n, d + 1,
               a.greedy_tokens, a.output);
  return 0;
}

}  // namespace

void register_dump_logits(CLI::App& root, SetAction set_action) {
  auto a = std::make_shared<DumpLogitsArgs>();
  CLI::App* app = root.add_subcommand("dump-logits", "write the logits of a batch of prompts (for comparisons)");
  add_engine_options(*app, a->engine);
  app->add_option("--prompts-file", a->prompts_file, "one prompt per line, token ids separated by spaces")->required();
  app->add_option("--decode-tokens", a->decode_tokens, "the last D tokens of each prompt run as decode steps");
  app->add_option("--greedy-tokens", a->greedy_tokens, "greedy ids to generate after each prompt");
  app->add_option("--output", a->output, "output prefix: PREFIX.npy and PREFIX.json")->required();
  app->callback([a, set_action] { set_action([a] { return run_dump_logits(*a); }); });
}

}  // namespace serve8
