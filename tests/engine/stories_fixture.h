// The real stories260K checkpoint from ../shared, converted once per test binary into a temporary
// HF directory, and the golden greedy ids of llama2.c's run.c.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "engine/engine.h"
#include "model/llama2c_convert.h"

namespace serve8::testing {

// ../shared, or $SERVE8_SHARED_DIR where the tests run away from the checkout (`scripts/gpu.sh
// pack` packs the checkpoint and the golden ids for the GPU machine).
inline std::string shared_dir() {
  const char* e = std::getenv("SERVE8_SHARED_DIR");
  return e && *e ? std::string(e) : std::string(SERVE8_SHARED_DIR);
}

// The converted checkpoint lives for the test binary and is removed when it exits.
inline std::string stories_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() : path(std::filesystem::temp_directory_path() / ("serve8-stories-" + std::to_string(::getpid()))) {
      convert_llama2c(shared_dir() + "/models/stories260K/stories260K.bin", path.string(), "");
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path.string();
}

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
};

inline std::vector<GoldenCase> golden_cases() {
  const std::string path = shared_dir() + "/golden/stories260K/greedy.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<GoldenCase> out;
  for (const auto& c : j["cases"])
    out.push_back({c["prompt_ids"].get<std::vector<int32_t>>(), c["greedy_ids"].get<std::vector<int32_t>>()});
  return out;
}

inline EngineArgs stories_args(const std::string& kv_dtype) {
  EngineArgs a;
  a.model_path = stories_dir();
  a.device = "cpu";
  a.kv_cache_dtype = kv_dtype;
  a.max_total_tokens = 16384;
  a.scheduler.max_running_requests = 64;
  a.scheduler.max_prefill_tokens = 2048;
  a.scheduler.chunked_prefill_size = 2048;
  return a;
}

// Greedy to exactly max_new tokens (EOS ignored).
inline SamplingParams greedy(int max_new) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  p.max_new_tokens = max_new;
  return p;
}

// Runs every request to completion on an engine without a thread; returns each one's output ids.
inline std::vector<std::vector<int32_t>> generate_all(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                                      const SamplingParams& params) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(engine.submit(p, params));
  engine.run_until_idle();
  std::vector<std::vector<int32_t>> outs;
  for (auto& s : streams) {
    std::vector<int32_t> ids;
    for (;;) {
      auto ev = s->next(std::chrono::milliseconds(0));
      if (!ev) throw std::runtime_error("request " + s->rid() + " did not finish");
      if (!ev->error.empty()) throw std::runtime_error(ev->error);
      ids.insert(ids.end(), ev->new_ids.begin(), ev->new_ids.end());
      if (ev->finished) break;
    }
    outs.push_back(std::move(ids));
  }
  return outs;
}

// The golden checks of golden_test.cpp, for any engine: each case alone, then all three in one
// batch (continuous batching must not change greedy ids). Greedy over the golden's whole length:
// run.c stops only at BOS (id 1), so EOS is ignored.
inline void expect_golden_one_by_one(Engine& engine) {
  const auto cases = golden_cases();
  ASSERT_EQ(cases.size(), 3u);
  for (size_t k = 0; k < cases.size(); ++k) {
    const GoldenCase& c = cases[k];
    SamplingParams p;
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_new_tokens = static_cast<int>(c.greedy.size());
    const auto out = generate_all(engine, {c.prompt}, p)[0];
    ASSERT_EQ(out.size(), c.greedy.size()) << "case " << k;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], c.greedy[i]) << "case " << k << " position " << i;
  }
}

inline void expect_golden_in_one_batch(Engine& engine) {
  const auto cases = golden_cases();
  ASSERT_EQ(cases.size(), 3u);
  SamplingParams p;
  p.temperature = 0.0f;
  p.ignore_eos = true;
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const auto& c : cases) {
    prompts.push_back(c.prompt);
    longest = std::max(longest, c.greedy.size());
  }
  p.max_new_tokens = static_cast<int>(longest);
  const auto outs = generate_all(engine, prompts, p);
  for (size_t k = 0; k < cases.size(); ++k) {
    ASSERT_GE(outs[k].size(), cases[k].greedy.size()) << "case " << k;
    for (size_t i = 0; i < cases[k].greedy.size(); ++i)
      ASSERT_EQ(outs[k][i], cases[k].greedy[i]) << "case " << k << " position " << i;
  }
}

}  // namespace serve8::testing
