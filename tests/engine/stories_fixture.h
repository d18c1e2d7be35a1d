// The real stories260K checkpoint from ../shared, converted once per test binary into a temporary
// HF directory, and the golden greedy ids of llama2.c's run.c.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/llama2c.h"

namespace serve8::testing {

inline std::string stories_dir() {
  static const std::string dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("serve8-stories-" + std::to_string(::getpid()));
    convert_llama2c(std::string(SERVE8_SHARED_DIR) + "/models/stories260K/stories260K.bin", d.string(), "");
    return d.string();
  }();
  return dir;
}

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
};

inline std::vector<GoldenCase> golden_cases() {
  std::ifstream f(std::string(SERVE8_SHARED_DIR) + "/golden/stories260K/greedy.json");
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

}  // namespace serve8::testing
