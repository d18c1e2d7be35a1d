#include "formats/llama2c.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace serve8 {
namespace {

constexpr uint64_t kHeaderBytes = 7 * sizeof(int32_t);
// The newer llama2.c exports (version 1, 2) start with this magic ("ak42" little-endian).
constexpr uint32_t kVersionedMagic = 0x616b3432u;

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

Llama2cCheckpoint::Llama2cCheckpoint(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SERVE8_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < kHeaderBytes) {
    ::close(fd);
    parse_header(nullptr, size_, path);  // throws: too short
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  SERVE8_CHECK(m != MAP_FAILED, "{}: cannot map: {}", path, std::strerror(errno));
  data_ = static_cast<const uint8_t*>(m);
  try {
    header_ = parse_header(data_, size_, path);
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
    throw;
  }
}

Llama2cCheckpoint::~Llama2cCheckpoint() { ::munmap(const_cast<uint8_t*>(data_), size_); }

const float* Llama2cCheckpoint::weights() const { return reinterpret_cast<const float*>(data_ + kHeaderBytes); }

Llama2cHeader read_llama2c_header(const std::string& checkpoint) { return Llama2cCheckpoint(checkpoint).header(); }

int llama2c_rope_row(int new_row, int head_size) {
  // llama2.c rotates pairs (2i, 2i+1) by frequency i; HF rotates (i, i + D/2) by frequency i. So
  // HF's row i must be llama2.c's row 2i, and row i + D/2 must be row 2i + 1.
  const int half = head_size / 2;
  return new_row < half ? 2 * new_row : 2 * (new_row - half) + 1;
}

}  // namespace serve8
