// The request sets of the benchmarks (bench-offline, and bench-serving to come), as SGLang's
// bench_serving builds them:
//   sharegpt   the first human turn of each conversation (cycled to --num-prompts); the shared
//              file has no replies, so output lengths are --sharegpt-output-len, or uniform in
//              [1, 512] from --seed
//   random     random token ids decoded to text; input and output lengths uniform in
//              [len * --random-range-ratio, len]
//   random-ids the same ids sent as ids (no tokenizer needed)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace serve8 {

class Tokenizer;

struct BenchDatasetOptions {
  std::string name = "sharegpt";  // sharegpt | random | random-ids
  std::string path;               // sharegpt JSON
  int num_prompts = 1000;
  int random_input_len = 1024;
  int random_output_len = 1024;
  double random_range_ratio = 0.0;
  int sharegpt_output_len = 0;  // 0: uniform in [1, 512]
  uint64_t seed = 1;
};

struct BenchRequest {
  std::string text;                // empty for random-ids
  std::vector<int32_t> input_ids;  // the prompt as the tokenizer (or random-ids) makes it
  int output_len = 0;
};

// Throws serve8::Error naming the option or file at fault. tokenizer may be null for random-ids.
std::vector<BenchRequest> make_bench_requests(const BenchDatasetOptions& o, const Tokenizer* tokenizer, int vocab_size);

}  // namespace serve8
