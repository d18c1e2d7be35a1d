// Loading Llama-family weights into backend memory: from safetensors, or random for benchmarks.
//
// Both paths move one bounded chunk at a time through a host staging buffer, so host memory stays
// flat whatever the model size (a 13B model in bf16 is 26 GB; the mapped checkpoint is page cache,
// not heap).
#include "model/weights.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "core/log.h"
#include "formats/safetensors.h"

namespace serve8 {
namespace {

// Host staging per chunk: large enough that copies run at full speed, small next to any model.
constexpr size_t kChunkBytes = 64ull << 20;

Tensor make_tensor(void* data, DType dtype, const std::vector<int64_t>& dims) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  for (int64_t d : dims) t.shape[static_cast<size_t>(t.ndim++)] = d;
  return t;
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

DType checked_compute_dtype(Backend& backend) {
  const DType t = backend.compute_dtype();
  SERVE8_CHECK(t == DType::kF32 || t == DType::kBF16 || t == DType::kF16,
               "backend {} computes in {}; weights can be fp32, bf16 or fp16", backend.name(), dtype_name(t));
  return t;
}

// One backend tensor to fill, from one or more stored tensors laid end to end (fused QKV, gate/up),
// each of source_rows[i] rows (empty: the one source has the whole shape).
struct Target {
  Tensor* dst;
  std::vector<int64_t> shape;
  std::vector<std::string> sources;
  std::vector<int64_t> source_rows;
};

// A fused matrix's target from its modules' `suffix` tensors, each [rows, cols] (or [rows]).
Target fused(Tensor* dst, const std::vector<HfModule>& modules, const std::string& suffix, int64_t cols) {
  Target t{dst, {0}, {}, {}};
  for (const HfModule& m : modules) {
    t.sources.push_back(m.name + suffix);
    t.source_rows.push_back(m.rows);
    t.shape[0] += m.rows;
  }
  if (cols > 0) t.shape.push_back(cols);
  return t;
}

// The HF names and shapes of every tensor the model needs, fused where LlamaWeights fuses.
std::vector<Target> plan_targets(const ModelConfig& c, LlamaWeights& w) {
  const int64_t h = c.hidden_size;
  std::vector<Target> targets;
  targets.push_back({&w.embed, {c.vocab_size, h}, {"model.embed_tokens.weight"}, {}});
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const auto m = layer_modules(c, l);
    targets.push_back({&lw.attn_norm, {h}, {p + "input_layernorm.weight"}, {}});
    targets.push_back(fused(&lw.wqkv, m[0], ".weight", h));
    if (c.attention_bias) targets.push_back(fused(&lw.bqkv, m[0], ".bias", 0));
    targets.push_back(fused(&lw.wo, m[1], ".weight", c.q_size()));
    targets.push_back({&lw.ffn_norm, {h}, {p + "post_attention_layernorm.weight"}, {}});
    targets.push_back(fused(&lw.w_gate_up, m[2], ".weight", h));
    targets.push_back(fused(&lw.w_down, m[3], ".weight", c.intermediate_size));
  }
  targets.push_back({&w.final_norm, {h}, {"model.norm.weight"}, {}});
  if (!c.tie_word_embeddings) targets.push_back({&w.lm_head, {c.vocab_size, h}, {"lm_head.weight"}, {}});
  return targets;
}

// The shape each source must have: a fused target splits its rows among its sources.
std::vector<std::vector<int64_t>> source_shapes(const Target& t) {
  if (t.source_rows.empty()) return {t.shape};
  std::vector<std::vector<int64_t>> out;
  for (int64_t r : t.source_rows) {
    std::vector<int64_t> s = t.shape;
    s[0] = r;
    out.push_back(s);
  }
  return out;
}

// The scale tensor of `t` if it is one of a layer's four matrices, else nullptr.
Tensor* scale_of(LlamaWeights& w, const Tensor* t) {
  for (LayerWeights& l : w.layers) {
    if (t == &l.wqkv) return &l.wqkv_scale;
    if (t == &l.wo) return &l.wo_scale;
    if (t == &l.w_gate_up) return &l.w_gate_up_scale;
    if (t == &l.w_down) return &l.w_down_scale;
  }
  return nullptr;
}

// An FP8 checkpoint matrix's scale per row, from each source's "<name>_scale" (one value for the
// tensor, or one per output channel).
void load_fp8_row_scales(const SafetensorsCheckpoint& ckpt, const Target& t, Tensor* scale, LlamaWeights& w,
                         Backend& backend) {
  std::vector<float> row_scales;
  for (const std::string& name : t.sources) {
    const std::string scale_name = name + "_scale";
    const std::vector<float> s = ckpt.file_of(scale_name).read_f32(scale_name);
    const int64_t r = ckpt.tensor(name).shape[0];
    SERVE8_CHECK(s.size() == 1 || static_cast<int64_t>(s.size()) == r,
                 "{}: '{}' has {} values; an FP8 weight of {} rows takes one scale, or one per row", ckpt.path(),
                 scale_name, s.size(), r);
    for (int64_t i = 0; i < r; ++i) row_scales.push_back(s.size() == 1 ? s[0] : s[static_cast<size_t>(i)]);
  }
  Buffer sbuf(backend, row_scales.size() * sizeof(float));
  backend.copy_to_device(sbuf.data(), row_scales.data(), row_scales.size() * sizeof(float));
  *scale = make_tensor(sbuf.data(), DType::kF32, {static_cast<int64_t>(row_scales.size())});
  w.storage.push_back(std::move(sbuf));
}

void finish(LlamaWeights& w, const ModelConfig& c) {
  if (c.tie_word_embeddings) w.lm_head = w.embed;
  for (const Buffer& b : w.storage) w.bytes += b.bytes();
}

// ---- dummy weights ----

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Element e of a tensor takes one half of the 64-bit hash of (key, e / 2): a counter-based
// generator, so a value does not depend on chunking, thread count or the order tensors are made
// in, and one hash serves two elements.
template <DType T>
void fill_chunk(uint8_t* out, uint64_t key, uint64_t first, int64_t n, float center, float half_width) {
  constexpr float kToPm1 = 2.0f / 16777216.0f;  // 24 random bits to [0, 2)
  const uint64_t end = first + static_cast<uint64_t>(n);
  const auto pair_begin = static_cast<int64_t>(first >> 1), pair_end = static_cast<int64_t>((end + 1) >> 1);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t p = pair_begin; p < pair_end; ++p) {
    const uint64_t h = mix64(key + static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ull);
    const uint32_t bits[2] = {static_cast<uint32_t>(h >> 40), static_cast<uint32_t>(h & 0xffffffu)};
    for (int k = 0; k < 2; ++k) {
      const uint64_t e = 2 * static_cast<uint64_t>(p) + static_cast<uint64_t>(k);
      if (e < first || e >= end) continue;
      const float v = center + half_width * (static_cast<float>(bits[k]) * kToPm1 - 1.0f);
      uint8_t* dst = out + (e - first) * dtype_size(T);
      if constexpr (T == DType::kF32) {
        std::memcpy(dst, &v, 4);
      } else {
        const uint16_t b = T == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(dst, &b, 2);
      }
    }
  }
}

struct DummySpec {
  Tensor* dst;
  std::vector<int64_t> shape;
  uint64_t id;       // identifies the tensor in the hash, independent of generation order
  float center;      // mean
  float half_width;  // values are uniform in center +- half_width
};

}  // namespace

std::array<std::vector<HfModule>, 4> layer_modules(const ModelConfig& c, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  return {{{{p + "self_attn.q_proj", c.q_size()},
            {p + "self_attn.k_proj", c.kv_size()},
            {p + "self_attn.v_proj", c.kv_size()}},
           {{p + "self_attn.o_proj", c.hidden_size}},
           {{p + "mlp.gate_proj", c.intermediate_size}, {p + "mlp.up_proj", c.intermediate_size}},
           {{p + "mlp.down_proj", c.hidden_size}}}};
}

WeightQuant parse_weight_quant(const std::string& name) {
  if (name.empty() || name == "none") return WeightQuant::kNone;
  if (name == "fp8") return WeightQuant::kFp8;
  fail("unknown --quantization '{}' (expected fp8, or none for the checkpoint's dtype)", name);
}

void quantize_if_matrix(LlamaWeights& w, Tensor* target, WeightQuant quant, Backend& backend) {
  Tensor* scale = quant == WeightQuant::kFp8 ? scale_of(w, target) : nullptr;
  if (scale == nullptr || target->dtype == DType::kFP8E4M3) return;
  const int64_t rows = target->dim(0), cols = target->dim(1);
  Buffer q(backend, static_cast<size_t>(rows * cols));
  Buffer s(backend, static_cast<size_t>(rows) * sizeof(float));
  const Tensor qt = q.view(DType::kFP8E4M3, {rows, cols}), st = s.view(DType::kF32, {rows});
  backend.quantize_fp8_rows(*target, qt, st);
  std::erase_if(w.storage, [&](const Buffer& b) { return b.data() == target->data; });
  *target = qt;
  *scale = st;
  w.storage.push_back(std::move(q));
  w.storage.push_back(std::move(s));
}

uint64_t weight_bytes_needed(const ModelConfig& c, DType compute, WeightQuant quant) {
  const uint64_t esize = dtype_size(compute), h = static_cast<uint64_t>(c.hidden_size);
  const uint64_t qkv = static_cast<uint64_t>(c.q_size() + 2 * c.kv_size()), q = static_cast<uint64_t>(c.q_size());
  const uint64_t inter = static_cast<uint64_t>(c.intermediate_size), layers = static_cast<uint64_t>(c.num_layers);
  const uint64_t matrix_params = layers * (qkv * h + h * q + 3 * inter * h);
  const uint64_t rest = static_cast<uint64_t>(c.num_parameters()) - matrix_params;
  if (quant == WeightQuant::kNone) return (matrix_params + rest) * esize;
  const uint64_t rows = layers * (qkv + h + 2 * inter + h);
  const uint64_t largest = std::max({qkv * h, h * q, 2 * inter * h});
  return matrix_params + rows * sizeof(float) + rest * esize + largest * esize;
}

void check_weights_fit(const ModelConfig& c, Backend& backend, WeightQuant quant, const std::string& origin) {
  if (!c.fp8_checkpoint.method.empty()) quant = WeightQuant::kFp8;  // its matrices stay e4m3
  const uint64_t need = weight_bytes_needed(c, backend.compute_dtype(), quant);
  const uint64_t free = backend.free_memory();
  SERVE8_CHECK(free == 0 || need <= free,
               "{}: {} layers of hidden size {} need {:.1f} GiB of {} weights, and the {} backend has {:.1f} GiB "
               "free (try --quantization fp8, a smaller --dtype, or another device)",
               origin, c.num_layers, c.hidden_size, static_cast<double>(need) / (1 << 30),
               quant == WeightQuant::kFp8 ? "fp8_e4m3 + " + std::string(dtype_name(backend.compute_dtype()))
                                          : std::string(dtype_name(backend.compute_dtype())),
               backend.name(), static_cast<double>(free) / (1 << 30));
}

std::string weight_dtype_name(const LlamaWeights& w, DType compute) {
  const std::string c(dtype_name(compute));
  for (const LayerWeights& l : w.layers)
    if (l.any_fp8()) return "fp8_e4m3 (per-channel scales) + " + c;
  return c;
}

LlamaWeights load_llama_weights(const ModelConfig& config, const std::string& model_dir, Backend& backend,
                                WeightQuant quant) {
  const auto start = std::chrono::steady_clock::now();
  const DType cdt = checked_compute_dtype(backend);
  const SafetensorsCheckpoint ckpt(model_dir);
  LlamaWeights w;
  const std::vector<Target> targets = plan_targets(config, w);

  // Check every name, shape and dtype before moving a byte, so a bad last layer fails in
  // milliseconds rather than after minutes of upload. FP8 (e4m3) sources are read as they are,
  // only for a layer's matrices and only where every source of the matrix is FP8.
  std::vector<bool> stored_fp8(targets.size(), false);
  for (size_t ti = 0; ti < targets.size(); ++ti) {
    const Target& t = targets[ti];
    const auto shapes = source_shapes(t);
    size_t fp8_sources = 0;
    for (size_t i = 0; i < t.sources.size(); ++i) {
      const SafetensorsFile& f = ckpt.file_of(t.sources[i]);
      const SafetensorsTensor& st = f.tensor(t.sources[i]);
      f.check_shape(st, shapes[i]);
      if (f.dtype(st) == DType::kFP8E4M3) {
        ++fp8_sources;
        SERVE8_CHECK(ckpt.contains(t.sources[i] + "_scale"), "{}: FP8 tensor '{}' has no '{}_scale'", model_dir,
                     t.sources[i], t.sources[i]);
      }
    }
    SERVE8_CHECK(fp8_sources == 0 || (fp8_sources == t.sources.size() && scale_of(w, t.dst) != nullptr),
                 "{}: '{}' is stored in F8_E4M3; serve8 reads FP8 tensors only as a layer's q/k/v, o, gate/up and "
                 "down weights, all of a fused group in FP8",
                 model_dir, t.sources[0]);
    stored_fp8[ti] = fp8_sources > 0;
  }
  if (config.fp8_checkpoint.weight_only)
    spdlog::info("{}: FP8 checkpoint ({}, weight-only); the GEMMs' inputs stay unquantized", model_dir,
                 config.fp8_checkpoint.method);
  else if (!config.fp8_checkpoint.method.empty())
    spdlog::info("{}: FP8 checkpoint ({}); activations are quantized per token, any static input scales unused",
                 model_dir, config.fp8_checkpoint.method);

  const size_t esize = dtype_size(cdt);
  const int64_t chunk_elems = static_cast<int64_t>(kChunkBytes / esize);
  int64_t largest = 0;
  for (const Target& t : targets)
    for (const std::string& name : t.sources) largest = std::max(largest, ckpt.tensor(name).numel());
  const std::unique_ptr<uint8_t[]> staging(new uint8_t[static_cast<size_t>(std::min(chunk_elems, largest)) * esize]);
  for (size_t ti = 0; ti < targets.size(); ++ti) {
    const Target& t = targets[ti];
    // FP8 sources are copied as stored, one byte an element, into the same chunks.
    const DType to = stored_fp8[ti] ? DType::kFP8E4M3 : cdt;
    const size_t to_size = dtype_size(to);
    Buffer buf(backend, static_cast<size_t>(product(t.shape)) * to_size);
    auto* dst = static_cast<uint8_t*>(buf.data());
    for (const std::string& name : t.sources) {
      const SafetensorsFile& f = ckpt.file_of(name);
      const SafetensorsTensor& st = f.tensor(name);
      for (int64_t begin = 0; begin < st.numel(); begin += chunk_elems) {
        const int64_t n = std::min(chunk_elems, st.numel() - begin);
        f.read(st, begin, n, to, staging.get());
        backend.copy_to_device(dst, staging.get(), static_cast<size_t>(n) * to_size);
        dst += static_cast<size_t>(n) * to_size;
      }
    }
    *t.dst = make_tensor(buf.data(), to, t.shape);
    w.storage.push_back(std::move(buf));
    if (stored_fp8[ti]) {
      load_fp8_row_scales(ckpt, t, scale_of(w, t.dst), w, backend);
    } else {
      quantize_if_matrix(w, t.dst, quant, backend);
    }
  }
  finish(w, config);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("loaded {} tensors from {}: {:.2f} GiB of {} weights in {:.1f} s", targets.size(), model_dir,
               static_cast<double>(w.bytes) / (1 << 30), weight_dtype_name(w, cdt), secs);
  return w;
}

LlamaWeights dummy_llama_weights(const ModelConfig& config, Backend& backend, uint64_t seed, WeightQuant quant) {
  const auto start = std::chrono::steady_clock::now();
  const DType cdt = checked_compute_dtype(backend);
  const ModelConfig& c = config;
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), inter = c.intermediate_size;
  // Uniform on [-a, a] has std a / sqrt(3); std 1 / sqrt(fan_in) keeps each GEMM's output at the
  // scale of its input.
  auto matrix_half_width = [](int64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); };
  constexpr float kNormHalfWidth = 0.05f, kBiasHalfWidth = 0.02f;

  LlamaWeights w;
  w.layers.resize(static_cast<size_t>(c.num_layers));
  std::vector<DummySpec> specs;
  specs.push_back({&w.embed, {c.vocab_size, h}, 0, 0.0f, matrix_half_width(h)});
  specs.push_back({&w.final_norm, {h}, 1, 1.0f, kNormHalfWidth});
  if (!c.tie_word_embeddings) specs.push_back({&w.lm_head, {c.vocab_size, h}, 2, 0.0f, matrix_half_width(h)});
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const uint64_t base = 16 + 8 * static_cast<uint64_t>(l);
    specs.push_back({&lw.attn_norm, {h}, base, 1.0f, kNormHalfWidth});
    specs.push_back({&lw.wqkv, {q + 2 * kv, h}, base + 1, 0.0f, matrix_half_width(h)});
    if (c.attention_bias) specs.push_back({&lw.bqkv, {q + 2 * kv}, base + 2, 0.0f, kBiasHalfWidth});
    specs.push_back({&lw.wo, {h, q}, base + 3, 0.0f, matrix_half_width(q)});
    specs.push_back({&lw.ffn_norm, {h}, base + 4, 1.0f, kNormHalfWidth});
    specs.push_back({&lw.w_gate_up, {2 * inter, h}, base + 5, 0.0f, matrix_half_width(h)});
    specs.push_back({&lw.w_down, {h, inter}, base + 6, 0.0f, matrix_half_width(inter)});
  }

  const size_t esize = dtype_size(cdt);
  const int64_t chunk_elems = static_cast<int64_t>(kChunkBytes / esize);
  int64_t largest = 0;
  for (const DummySpec& s : specs) largest = std::max(largest, product(s.shape));
  const std::unique_ptr<uint8_t[]> staging(new uint8_t[static_cast<size_t>(std::min(chunk_elems, largest)) * esize]);
  for (const DummySpec& s : specs) {
    const int64_t numel = product(s.shape);
    Buffer buf(backend, static_cast<size_t>(numel) * esize);
    const uint64_t key = mix64(seed ^ mix64(s.id + 0x5e7e8ull));
    for (int64_t begin = 0; begin < numel; begin += chunk_elems) {
      const int64_t n = std::min(chunk_elems, numel - begin);
      const auto first = static_cast<uint64_t>(begin);
      switch (cdt) {
        case DType::kF32:
          fill_chunk<DType::kF32>(staging.get(), key, first, n, s.center, s.half_width);
          break;
        case DType::kBF16:
          fill_chunk<DType::kBF16>(staging.get(), key, first, n, s.center, s.half_width);
          break;
        case DType::kF16:
          fill_chunk<DType::kF16>(staging.get(), key, first, n, s.center, s.half_width);
          break;
        case DType::kFP8E5M2:
        case DType::kFP8E4M3:
        case DType::kI32:
        case DType::kI8:
        case DType::kI4:
          fail("dummy weights in {}", dtype_name(cdt));
      }
      backend.copy_to_device(static_cast<uint8_t*>(buf.data()) + static_cast<size_t>(begin) * esize, staging.get(),
                             static_cast<size_t>(n) * esize);
    }
    *s.dst = make_tensor(buf.data(), cdt, s.shape);
    w.storage.push_back(std::move(buf));
    quantize_if_matrix(w, s.dst, quant, backend);
  }
  finish(w, config);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  spdlog::info("generated dummy weights (seed {}): {:.2f} GiB of {} in {:.1f} s", seed,
               static_cast<double>(w.bytes) / (1 << 30), weight_dtype_name(w, cdt), secs);
  return w;
}

}  // namespace serve8
