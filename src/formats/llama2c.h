// llama2.c checkpoints (legacy format, version 0): the header, validated against the file size,
// and the weights mapped read-only in file order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace serve8 {

// The seven int32s at the start of a llama2.c checkpoint. vocab_size is stored negative when a
// separate classifier follows the weights; here it is always positive and `shared_classifier` says.
struct Llama2cHeader {
  int dim = 0;
  int hidden_dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;
  int seq_len = 0;
  bool shared_classifier = true;

  int head_size() const { return dim / n_heads; }
  int kv_dim() const { return n_kv_heads * head_size(); }
  // Bytes the whole file must have: header, weights, the two RoPE tables, the classifier if any.
  uint64_t file_bytes() const;
};

// Reads and validates the header of `checkpoint` (sizes against the file length).
Llama2cHeader read_llama2c_header(const std::string& checkpoint);

// The whole checkpoint mapped read-only, its header checked; weights() is the first float after it.
class Llama2cCheckpoint {
 public:
  explicit Llama2cCheckpoint(const std::string& path);
  ~Llama2cCheckpoint();
  Llama2cCheckpoint(const Llama2cCheckpoint&) = delete;
  Llama2cCheckpoint& operator=(const Llama2cCheckpoint&) = delete;

  const Llama2cHeader& header() const { return header_; }
  const float* weights() const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  Llama2cHeader header_;
};

// Row order that turns one head's interleaved-pair rows into rotate-half rows: new row j of a
// head is old row perm[j]; evens first, then odds ([0, 2, 4, .., 1, 3, 5, ..]).
int llama2c_rope_row(int new_row, int head_size);

}  // namespace serve8
