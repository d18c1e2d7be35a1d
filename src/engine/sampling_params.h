// SamplingParams: what a request asks of the sampler and of stopping, as SGLang's
// `sampling_params` names them. Parsed from JSON in server/, validated here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace serve8 {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = -1;
  float min_p = 0.0f;
  int max_new_tokens = 128;
  std::vector<std::string> stop;
  std::vector<int> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  std::optional<uint64_t> seed;

  // Returns an empty string when valid, else what is wrong ("temperature must be >= 0, got -1").
  std::string validate(int vocab_size) const;
};

}  // namespace serve8
