#include "cli/bench_dataset.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {

namespace {

std::vector<std::string> sharegpt_prompts(const std::string& path) {
  SERVE8_CHECK(!path.empty(), "--dataset-name sharegpt needs --dataset-path (e.g. ../shared/data/sharegpt/*.json)");
  std::ifstream in(path);
  SERVE8_CHECK(in.good(), "--dataset-path {}: cannot read the file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    fail("--dataset-path {}: not JSON ({})", path, e.what());
  }
  SERVE8_CHECK(j.is_array(), "--dataset-path {}: expected a JSON array of conversations", path);
  std::vector<std::string> out;
  for (const auto& conv : j) {
    if (!conv.is_object() || !conv.contains("conversations") || !conv["conversations"].is_array()) continue;
    for (const auto& turn : conv["conversations"]) {
      if (turn.is_object() && turn.value("from", "") == "human" && turn.contains("value") &&
          turn["value"].is_string()) {
        out.push_back(turn["value"].get<std::string>());
        break;
      }
    }
  }
  SERVE8_CHECK(!out.empty(), "--dataset-path {}: no conversation has a human turn", path);
  return out;
}

int uniform_len(std::mt19937_64& rng, int len, double ratio) {
  const int lo = std::max(1, static_cast<int>(static_cast<double>(len) * ratio));
  return std::uniform_int_distribution<int>(lo, std::max(lo, len))(rng);
}

}  // namespace

std::vector<BenchRequest> make_bench_requests(const BenchDatasetOptions& o, const Tokenizer* tokenizer,
                                              int vocab_size) {
  SERVE8_CHECK(o.num_prompts > 0, "--num-prompts must be positive, got {}", o.num_prompts);
  std::mt19937_64 rng(o.seed);
  std::vector<BenchRequest> reqs;
  if (o.name == "sharegpt") {
    SERVE8_CHECK(tokenizer != nullptr, "--dataset-name sharegpt needs a tokenizer (--tokenizer-path)");
    SERVE8_CHECK(o.sharegpt_output_len >= 0, "--sharegpt-output-len must be >= 0, got {}", o.sharegpt_output_len);
    const std::vector<std::string> prompts = sharegpt_prompts(o.path);
    std::uniform_int_distribution<int> out_len(1, 512);
    for (int i = 0; i < o.num_prompts; ++i) {
      BenchRequest r;
      r.text = prompts[static_cast<size_t>(i) % prompts.size()];
      r.input_ids = tokenizer->encode(r.text, true);
      r.output_len = o.sharegpt_output_len > 0 ? o.sharegpt_output_len : out_len(rng);
      reqs.push_back(std::move(r));
    }
    return reqs;
  }
  SERVE8_CHECK(o.name == "random" || o.name == "random-ids",
               "--dataset-name {}: expected sharegpt, random or random-ids", o.name);
  SERVE8_CHECK(o.random_input_len > 0 && o.random_output_len > 0,
               "--random-input-len and --random-output-len must be positive");
  SERVE8_CHECK(o.random_range_ratio >= 0.0 && o.random_range_ratio <= 1.0,
               "--random-range-ratio must be in [0, 1], got {}", o.random_range_ratio);
  SERVE8_CHECK(o.name == "random-ids" || tokenizer != nullptr,
               "--dataset-name random needs a tokenizer (--tokenizer-path); random-ids does not");
  // Ids from the middle of the vocabulary: no special tokens (low ids) at either end.
  const int lo = std::min(vocab_size - 1, 100), hi = std::max(lo, vocab_size - 1);
  std::uniform_int_distribution<int32_t> tok(lo, hi);
  for (int i = 0; i < o.num_prompts; ++i) {
    BenchRequest r;
    const int in_len = uniform_len(rng, o.random_input_len, o.random_range_ratio);
    r.output_len = uniform_len(rng, o.random_output_len, o.random_range_ratio);
    std::vector<int32_t> ids(static_cast<size_t>(in_len));
    for (auto& t : ids) t = tok(rng);
    if (o.name == "random") {
      r.text = tokenizer->decode(ids);
      r.input_ids = tokenizer->encode(r.text, false);  // what a server will count
    } else {
      r.input_ids = std::move(ids);
    }
    reqs.push_back(std::move(r));
  }
  return reqs;
}

}  // namespace serve8
