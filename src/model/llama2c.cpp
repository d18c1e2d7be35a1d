#include "model/llama2c.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace serve8 {
namespace {

constexpr uint64_t kHeaderBytes = 7 * sizeof(int32_t);
// The newer llama2.c exports (version 1, 2) start with this magic ("ak42" little-endian).
constexpr uint32_t kVersionedMagic = 0x616b3432u;

// A read-only mapping of the whole checkpoint, so tensors are written straight from it.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    SERVE8_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      fail("{}: cannot stat: {}", path, std::strerror(errno));
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      SERVE8_CHECK(m != MAP_FAILED, "{}: cannot map: {}", path, std::strerror(errno));
      data_ = static_cast<const uint8_t*>(m);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

Llama2cHeader parse_header(const uint8_t* bytes, size_t file_size, const std::string& path) {
  SERVE8_CHECK(file_size >= kHeaderBytes, "{}: {} bytes is too short for a llama2.c checkpoint header ({} bytes)", path,
               file_size, kHeaderBytes);
  int32_t v[7];
  std::memcpy(v, bytes, sizeof(v));
  SERVE8_CHECK(static_cast<uint32_t>(v[0]) != kVersionedMagic,
               "{}: this is a versioned llama2.c export (version {}); serve8 reads the legacy format "
               "(llama2.c export.py --version 0)",
               path, v[1]);
  Llama2cHeader h;
  h.dim = v[0];
  h.hidden_dim = v[1];
  h.n_layers = v[2];
  h.n_heads = v[3];
  h.n_kv_heads = v[4];
  h.shared_classifier = v[5] > 0;
  h.vocab_size = v[5] < 0 ? -v[5] : v[5];
  h.seq_len = v[6];
  // Bounds keep the size arithmetic below far from overflow and catch files that are not checkpoints.
  auto in_range = [&](int x, int limit, const char* what) {
    SERVE8_CHECK(x > 0 && x <= limit, "{}: header field {} = {} is out of range (1..{}); not a llama2.c checkpoint?",
                 path, what, x, limit);
  };
  in_range(h.dim, 1 << 20, "dim");
  in_range(h.hidden_dim, 1 << 20, "hidden_dim");
  in_range(h.n_layers, 1 << 12, "n_layers");
  in_range(h.n_heads, 1 << 12, "n_heads");
  in_range(h.n_kv_heads, 1 << 12, "n_kv_heads");
  in_range(h.vocab_size, 1 << 24, "vocab_size");
  in_range(h.seq_len, 1 << 24, "seq_len");
  SERVE8_CHECK(h.dim % h.n_heads == 0, "{}: dim {} is not a multiple of n_heads {}", path, h.dim, h.n_heads);
  SERVE8_CHECK(h.head_size() % 2 == 0, "{}: head size {} must be even for RoPE", path, h.head_size());
  SERVE8_CHECK(h.n_heads % h.n_kv_heads == 0, "{}: n_heads {} is not a multiple of n_kv_heads {}", path, h.n_heads,
               h.n_kv_heads);
  SERVE8_CHECK(h.file_bytes() == file_size,
               "{}: the header (dim {}, hidden_dim {}, n_layers {}, n_heads {}, n_kv_heads {}, vocab_size {}{}, "
               "seq_len {}) implies a file of {} bytes, but it has {} bytes",
               path, h.dim, h.hidden_dim, h.n_layers, h.n_heads, h.n_kv_heads, h.vocab_size,
               h.shared_classifier ? "" : " with a separate classifier", h.seq_len, h.file_bytes(), file_size);
  return h;
}

}  // namespace

uint64_t Llama2cHeader::file_bytes() const {
  const uint64_t d = static_cast<uint64_t>(dim), hid = static_cast<uint64_t>(hidden_dim);
  const uint64_t l = static_cast<uint64_t>(n_layers), v = static_cast<uint64_t>(vocab_size);
  const uint64_t kv = static_cast<uint64_t>(kv_dim());
  uint64_t floats = v * d;                                                        // token embedding
  floats += l * d;                                                                // attention RMSNorm
  floats += l * d * d + 2 * l * kv * d;                                           // wq, wk, wv
  floats += l * d * d;                                                            // wo
  floats += l * d;                                                                // FFN RMSNorm
  floats += 3 * l * hid * d;                                                      // w1, w2, w3
  floats += d;                                                                    // final RMSNorm
  floats += static_cast<uint64_t>(seq_len) * static_cast<uint64_t>(head_size());  // two RoPE tables of half that
  if (!shared_classifier) floats += v * d;
  return kHeaderBytes + 4 * floats;
}

Llama2cHeader read_llama2c_header(const std::string& checkpoint) {
  const MappedFile file(checkpoint);
  return parse_header(file.data(), file.size(), checkpoint);
}

int llama2c_rope_row(int new_row, int head_size) {
  // llama2.c rotates pairs (2i, 2i+1) by frequency i; HF rotates (i, i + D/2) by frequency i. So
  // HF's row i must be llama2.c's row 2i, and row i + D/2 must be row 2i + 1.
  const int half = head_size / 2;
  return new_row < half ? 2 * new_row : 2 * (new_row - half) + 1;
}

void convert_llama2c(const std::string& checkpoint, const std::string& output_dir, const std::string& tokenizer_model) {
  namespace fs = std::filesystem;
  const MappedFile file(checkpoint);
  const Llama2cHeader h = parse_header(file.data(), file.size(), checkpoint);
  SERVE8_CHECK(tokenizer_model.empty() || fs::is_regular_file(tokenizer_model), "{}: no such tokenizer file",
               tokenizer_model);
  fs::create_directories(output_dir);

  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = h.dim;
  c.intermediate_size = h.hidden_dim;
  c.num_layers = h.n_layers;
  c.num_heads = h.n_heads;
  c.num_kv_heads = h.n_kv_heads;
  c.head_dim = h.head_size();
  c.vocab_size = h.vocab_size;
  c.max_position_embeddings = h.seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = h.shared_classifier;
  c.attention_bias = false;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  c.torch_dtype = DType::kF32;

  // Walk the arrays in file order.
  const auto* p = reinterpret_cast<const float*>(file.data() + kHeaderBytes);
  auto take = [&p](uint64_t n) {
    const float* at = p;
    p += n;
    return at;
  };
  const int64_t d = h.dim, hid = h.hidden_dim, kv = h.kv_dim(), v = h.vocab_size, nl = h.n_layers;
  const float* embed = take(static_cast<uint64_t>(v * d));
  const float* rms_att = take(static_cast<uint64_t>(nl * d));
  const float* wq = take(static_cast<uint64_t>(nl * d * d));
  const float* wk = take(static_cast<uint64_t>(nl * kv * d));
  const float* wv = take(static_cast<uint64_t>(nl * kv * d));
  const float* wo = take(static_cast<uint64_t>(nl * d * d));
  const float* rms_ffn = take(static_cast<uint64_t>(nl * d));
  const float* w1 = take(static_cast<uint64_t>(nl * hid * d));
  const float* w2 = take(static_cast<uint64_t>(nl * d * hid));
  const float* w3 = take(static_cast<uint64_t>(nl * hid * d));
  const float* rms_final = take(static_cast<uint64_t>(d));
  take(static_cast<uint64_t>(h.seq_len) * static_cast<uint64_t>(h.head_size()));  // the RoPE tables, unused
  const float* classifier = h.shared_classifier ? nullptr : take(static_cast<uint64_t>(v * d));

  // Rows of one projection [heads * head_size, d], reordered head by head for rotate-half RoPE.
  const int hs = h.head_size();
  auto permuted = [d, hs](const float* src, int64_t heads) {
    return [src, heads, d, hs](void* dst) {
      auto* out = static_cast<float*>(dst);
      for (int64_t head = 0; head < heads; ++head)
        for (int j = 0; j < hs; ++j)
          std::memcpy(out + (head * hs + j) * d, src + (head * hs + llama2c_rope_row(j, hs)) * d,
                      static_cast<size_t>(d) * sizeof(float));
    };
  };

  const std::string st_path = (fs::path(output_dir) / "model.safetensors").string();
  SafetensorsWriter writer(st_path);
  const DType f32 = DType::kF32;
  writer.add("model.embed_tokens.weight", f32, {v, d}, embed);
  for (int64_t l = 0; l < nl; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    writer.add(pre + "input_layernorm.weight", f32, {d}, rms_att + l * d);
    writer.add(pre + "self_attn.q_proj.weight", f32, {d, d}, permuted(wq + l * d * d, h.n_heads));
    writer.add(pre + "self_attn.k_proj.weight", f32, {kv, d}, permuted(wk + l * kv * d, h.n_kv_heads));
    writer.add(pre + "self_attn.v_proj.weight", f32, {kv, d}, wv + l * kv * d);
    writer.add(pre + "self_attn.o_proj.weight", f32, {d, d}, wo + l * d * d);
    writer.add(pre + "post_attention_layernorm.weight", f32, {d}, rms_ffn + l * d);
    writer.add(pre + "mlp.gate_proj.weight", f32, {hid, d}, w1 + l * hid * d);
    writer.add(pre + "mlp.down_proj.weight", f32, {d, hid}, w2 + l * d * hid);
    writer.add(pre + "mlp.up_proj.weight", f32, {hid, d}, w3 + l * hid * d);
  }
  writer.add("model.norm.weight", f32, {d}, rms_final);
  if (classifier) writer.add("lm_head.weight", f32, {v, d}, classifier);
  writer.set_metadata("source", "llama2.c legacy checkpoint converted by serve8");
  writer.finish();

  const fs::path config_path = fs::path(output_dir) / "config.json";
  std::ofstream out(config_path, std::ios::binary | std::ios::trunc);
  out << model_config_to_json(c);
  out.close();
  SERVE8_CHECK(out.good(), "{}: write failed", config_path.string());

  if (!tokenizer_model.empty())
    fs::copy_file(tokenizer_model, fs::path(output_dir) / "tokenizer.model", fs::copy_options::overwrite_existing);
  spdlog::info("converted {} ({} layers, dim {}, vocab {}) to {}", checkpoint, h.n_layers, h.dim, h.vocab_size,
               output_dir);
}

}  // namespace serve8
