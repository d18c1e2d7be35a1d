// KV pool writes and paged attention on the CPU: the reference the CUDA kernels are tested against.
// Both dispatch once over the KV storage dtype into a template; the activations (q, k, v, out) are
// fp32/bf16/fp16 rows converted to fp32 at the edges. Attention accumulates in fp32.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace serve8::cpu {

namespace {

// Orthonormal Walsh-Hadamard transform in place (n a power of two); its own inverse. int8 and int4
// pools store each K and V row rotated by it, so that no channel's outlier sets the row's scale; q
// is rotated alike (q.k is unchanged) and the attention output rotated back.
void hadamard(float* x, int64_t n) {
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float a = x[j], b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
  const float f = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

struct KvGeometry {
  int64_t num_slots, heads, head_dim;
};

// Pool row `at`'s parameters in KvLayer::row_params (fp16, K's record then V's): int8 its scale,
// int4 its scale and minimum.
uint16_t* row_param(const Tensor& row_params, int64_t at, bool is_v) {
  const int64_t per_row = row_params.dim(3) / 2;
  return static_cast<uint16_t*>(row_params.data) + per_row * (2 * at + (is_v ? 1 : 0));
}

// int4 rows: 16 codes between the row's minimum and maximum, the range narrowed where that lowers
// the row's squared error (kv_layout.h's 16 trims of its ends): about 14% lower KLD on
// SmolLM2-135M than the full range.
struct Int4Row {
  float scale, min;
};
Int4Row fit_int4_row(const float* x, int64_t n) {
  const auto [lo_it, hi_it] = std::minmax_element(x, x + n);
  const float lo = *lo_it, range = *hi_it - *lo_it;
  Int4Row best{range / 15.0f, lo};
  if (!(range > 0.0f)) return {0.0f, lo};
  float best_err = INFINITY;
  for (int t = 0; t < kInt4Trims; ++t) {
    int a = 0, b = 0;
    int4_trim(t, a, b);
    const float l = lo + 0.02f * static_cast<float>(a) * range;
    const float s = (1.0f - 0.02f * static_cast<float>(a + b)) * range / 15.0f;
    float err = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float q = std::clamp(std::nearbyint((x[i] - l) / s), 0.0f, 15.0f);
      const float e = l + q * s - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best = {s, l};
    }
  }
  return best;
}

// Checks the layer's tensors against each other and returns their geometry.
KvGeometry check_kv_layer(const KvLayer& kv, std::string_view op) {
  check_tensor(kv.k, op, "kv.k");
  SERVE8_CHECK(kv.k.ndim == 4 && kv.k.dim(2) == kKvPageSize,
               "{}: kv.k has shape {}, expected [pages, kv_heads, {}, head_dim]", op, kv.k.shape_str(), kKvPageSize);
  const bool i4 = kv.k.dtype == DType::kI4;
  const KvGeometry g{kv.k.dim(0) * kKvPageSize, kv.k.dim(1), kv.k.dim(3) * (i4 ? 2 : 1)};
  check_shape(kv.v, {kv.k.dim(0), g.heads, kKvPageSize, kv.k.dim(3)}, op, "kv.v");
  SERVE8_CHECK(kv.v.dtype == kv.k.dtype, "{}: kv.k is {} but kv.v is {}", op, dtype_name(kv.k.dtype),
               dtype_name(kv.v.dtype));
  check_dtype(kv.k_scale, DType::kF32, op, "kv.k_scale");
  check_dtype(kv.v_scale, DType::kF32, op, "kv.v_scale");
  check_shape(kv.k_scale, {g.heads}, op, "kv.k_scale");
  check_shape(kv.v_scale, {g.heads}, op, "kv.v_scale");
  if (kv_dtype_is_rotated(kv.k.dtype)) {
    check_dtype(kv.row_params, DType::kF16, op, "kv.row_params");
    check_shape(kv.row_params, {kv.k.dim(0), g.heads, kKvPageSize, kv_row_param_bytes(kv.k.dtype)}, op,
                "kv.row_params");
    for (const Tensor* t : {&kv.k_mean, &kv.v_mean}) {
      check_dtype(*t, DType::kF32, op, "kv means");
      check_shape(*t, {g.heads, g.head_dim}, op, "kv means");
    }
  }
  return g;
}

void check_slots(const int32_t* slots, int64_t n, int64_t num_slots, std::string_view op, std::string_view name) {
  for (int64_t i = 0; i < n; ++i) {
    SERVE8_CHECK(slots[i] >= 0 && slots[i] < num_slots, "{}: {}[{}] = {} is outside the pool's {} slots", op, name, i,
                 slots[i], num_slots);
  }
}

// One item per (K or V, kv head); each walks the tokens in batch order, so that if two tokens name
// the same slot the later one wins whatever the thread count.
template <typename S>
void kv_store_impl(const Tensor& k, const Tensor& v, const int32_t* slots, int64_t t_count, const KvLayer& kv,
                   const KvGeometry& g) {
  constexpr bool kRotated = std::is_same_v<S, int8_t> || std::is_same_v<S, Int4Pair>;
  const float* k_scale = kv.k_scale.ptr<const float>();
  const float* v_scale = kv.v_scale.ptr<const float>();
#pragma omp parallel if (2 * t_count * g.heads * g.head_dim >= kParallelMinElements)
  {
    std::vector<float> row(static_cast<size_t>(g.head_dim));
#pragma omp for schedule(static)
    for (int64_t item = 0; item < 2 * g.heads; ++item) {
      const bool is_v = item >= g.heads;
      const int64_t h = item % g.heads;
      const Tensor& src = is_v ? v : k;
      S* pool = (is_v ? kv.v : kv.k).template ptr<S>();
      const float scale = (is_v ? v_scale : k_scale)[h];
      for (int64_t t = 0; t < t_count; ++t) {
        load_f32(src, (t * g.heads + h) * g.head_dim, g.head_dim, row.data());
        const int64_t at = kv_row(slots[t], h, g.heads);
        if constexpr (kRotated) {
          const float* mean = (is_v ? kv.v_mean : kv.k_mean).template ptr<const float>() + h * g.head_dim;
          for (int64_t i = 0; i < g.head_dim; ++i) row[static_cast<size_t>(i)] -= mean[i];
          hadamard(row.data(), g.head_dim);
        }
        if constexpr (std::is_same_v<S, Int4Pair>) {
          for (float& x : row) x /= scale;
          const Int4Row r = fit_int4_row(row.data(), g.head_dim);
          uint16_t* params = row_param(kv.row_params, at, is_v);
          params[0] = f32_to_f16(r.scale);
          params[1] = f32_to_f16(r.min);
          // Codes against the stored (fp16) scale and minimum, which attention reads back.
          const float s = f16_to_f32(params[0]), lo = f16_to_f32(params[1]);
          const float inv = s > 0.0f ? 1.0f / s : 0.0f;
          uint8_t* dst = reinterpret_cast<uint8_t*>(pool) + at * (g.head_dim / 2);
          for (int64_t i = 0; i < g.head_dim; i += 2) {
            const auto code = [&](int64_t e) {
              return static_cast<uint8_t>(
                  std::clamp(std::nearbyint((row[static_cast<size_t>(e)] - lo) * inv), 0.0f, 15.0f));
            };
            dst[i / 2] = static_cast<uint8_t>(code(i) | (code(i + 1) << 4));
          }
        } else if constexpr (std::is_same_v<S, int8_t>) {
          // Symmetric int8 of the rotated row with its own scale: its largest |value| maps to 127.
          S* dst = pool + at * g.head_dim;
          float amax = 0.0f;
          for (float& x : row) {
            x /= scale;
            amax = std::max(amax, std::fabs(x));
          }
          // Stored in fp16 (saturating: a row past 127 * 65504 keeps the largest scale); the codes
          // are taken against the stored scale, which attention reads back.
          uint16_t* param = row_param(kv.row_params, at, is_v);
          *param = f32_to_f16(std::min(amax / 127.0f, kF16Max));
          const float row_scale = f16_to_f32(*param);
          const float inv = row_scale > 0.0f ? 1.0f / row_scale : 0.0f;
          for (int64_t i = 0; i < g.head_dim; ++i) {
            const int code =
                static_cast<int>(std::clamp(std::nearbyint(row[static_cast<size_t>(i)] * inv), -127.0f, 127.0f));
            dst[i] = static_cast<int8_t>(code ^ 0x80);  // offset by 128 (dtype.h)
          }
        } else {
          // A true division (not a multiply by 1/scale): the CUDA kernel divides too, bit for bit.
          S* dst = pool + at * g.head_dim;
          for (int64_t i = 0; i < g.head_dim; ++i) dst[i] = from_f32<S>(row[static_cast<size_t>(i)] / scale);
        }
      }
    }
  }
}

struct AttentionArgs {
  const Tensor* q;
  Tensor out;
  const KvLayer* kv;
  KvGeometry g;
  int64_t t_count, q_heads, group;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int32_t* kv_indices;
  std::vector<int32_t> seq_of_token;
  int64_t max_kv_len;
  float softmax_scale;
};

// Row `at` of a pool (K or V), decoded to fp32 before the head's scale: int8 times its row's
// scale, int4 its row's minimum plus code times scale.
template <typename S>
void load_pool_row(const Tensor& pool, const Tensor& row_params, bool is_v, int64_t at, int64_t d, float* out) {
  if constexpr (std::is_same_v<S, Int4Pair>) {
    const uint16_t* p = row_param(row_params, at, is_v);
    const float s = f16_to_f32(p[0]), lo = f16_to_f32(p[1]);
    const uint8_t* r = pool.ptr<const uint8_t>() + at * (d / 2);
    for (int64_t i = 0; i < d; i += 2) {
      out[i] = lo + static_cast<float>(r[i / 2] & 15) * s;
      out[i + 1] = lo + static_cast<float>(r[i / 2] >> 4) * s;
    }
  } else {
    const S* r = pool.ptr<const S>() + at * d;
    const float rs = std::is_same_v<S, int8_t> ? f16_to_f32(*row_param(row_params, at, is_v)) : 1.0f;
    for (int64_t i = 0; i < d; ++i) out[i] = to_f32(r[i]) * rs;
  }
}

// One item per (new token, kv head): the group's q heads share each dequantized K and V row.
template <typename S>
void attention_impl(const AttentionArgs& a) {
  const int64_t d = a.g.head_dim, group = a.group, heads = a.g.heads;
  const float* k_scale = a.kv->k_scale.ptr<const float>();
  const float* v_scale = a.kv->v_scale.ptr<const float>();
  constexpr bool kRotated = std::is_same_v<S, int8_t> || std::is_same_v<S, Int4Pair>;
  // Work: every new token's q heads against up to max_kv_len K and V rows.
#pragma omp parallel if (a.t_count * a.q_heads * a.max_kv_len * d >= kParallelMinElements)
  {
    std::vector<float> q(static_cast<size_t>(group * d)), acc(static_cast<size_t>(group * d));
    std::vector<float> row(static_cast<size_t>(d)), denom(static_cast<size_t>(group));
    std::vector<float> scores(static_cast<size_t>(group * a.max_kv_len));
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < a.t_count * heads; ++item) {
      const int64_t t = item / heads, kvh = item % heads;
      const int32_t b = a.seq_of_token[static_cast<size_t>(t)];
      const int64_t q_len = a.qo_indptr[b + 1] - a.qo_indptr[b];
      const int64_t kv_len = a.kv_indptr[b + 1] - a.kv_indptr[b];
      const int64_t n = kv_len - q_len + (t - a.qo_indptr[b]) + 1;  // causal: prefix plus new tokens up to t
      const int32_t* slots = a.kv_indices + a.kv_indptr[b];
      load_f32(*a.q, (t * a.q_heads + kvh * group) * d, group * d, q.data());
      if constexpr (kRotated)
        for (int64_t h = 0; h < group; ++h) hadamard(q.data() + h * d, d);

      // Scores: q · k_stored, with k_scale folded into the softmax scale.
      const float score_scale = a.softmax_scale * k_scale[kvh];
      for (int64_t j = 0; j < n; ++j) {
        load_pool_row<S>(a.kv->k, a.kv->row_params, false, kv_row(slots[j], kvh, heads), d, row.data());
        for (int64_t h = 0; h < group; ++h) {
          const float* qh = q.data() + h * d;
          float dot = 0.0f;
          for (int64_t i = 0; i < d; ++i) dot += qh[i] * row[static_cast<size_t>(i)];
          scores[static_cast<size_t>(h * n + j)] = dot * score_scale;
        }
      }
      // Numerically stable softmax: subtract the row max before exponentiating.
      for (int64_t h = 0; h < group; ++h) {
        float* s = scores.data() + h * n;
        const float m = *std::max_element(s, s + n);
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        denom[static_cast<size_t>(h)] = sum;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        load_pool_row<S>(a.kv->v, a.kv->row_params, true, kv_row(slots[j], kvh, heads), d, row.data());
        for (int64_t h = 0; h < group; ++h) {
          const float p = scores[static_cast<size_t>(h * n + j)];
          float* ah = acc.data() + h * d;
          for (int64_t i = 0; i < d; ++i) ah[i] += p * row[static_cast<size_t>(i)];
        }
      }
      // v_scale folds into the output normalization.
      for (int64_t h = 0; h < group; ++h) {
        const float f = v_scale[kvh] / denom[static_cast<size_t>(h)];
        for (int64_t i = 0; i < d; ++i) acc[static_cast<size_t>(h * d + i)] *= f;
        if constexpr (kRotated) {
          hadamard(acc.data() + h * d, d);  // back from the rotated V rows, and V's mean added back
          const float* mean = a.kv->v_mean.ptr<const float>() + kvh * d;
          for (int64_t i = 0; i < d; ++i) acc[static_cast<size_t>(h * d + i)] += mean[i];
        }
      }
      store_f32(acc.data(), group * d, a.out, (t * a.q_heads + kvh * group) * d);
    }
  }
}

}  // namespace

void kv_store(const Tensor& k, const Tensor& v, const DeviceBatch& batch, const KvLayer& kv) {
  constexpr std::string_view op = "kv_store";
  const KvGeometry g = check_kv_layer(kv, op);
  const int64_t t_count = batch.num_tokens;
  check_float(k, op, "k");
  check_float(v, op, "v");
  check_shape(k, {t_count, g.heads, g.head_dim}, op, "k");
  check_shape(v, {t_count, g.heads, g.head_dim}, op, "v");
  check_dtype(batch.out_slots, DType::kI32, op, "batch.out_slots");
  check_shape(batch.out_slots, {t_count}, op, "batch.out_slots");
  const int32_t* slots = batch.out_slots.ptr<const int32_t>();
  check_slots(slots, t_count, g.num_slots, op, "out_slots");
  if (t_count == 0) return;
  dispatch_kv(kv.k.dtype, op, [&]<typename S>() { kv_store_impl<S>(k, v, slots, t_count, kv, g); });
}

void rope_kv_store(Tensor qkv, Tensor q, const Tensor& positions, const Tensor& inv_freq, const DeviceBatch& batch,
                   const KvLayer& kv) {
  constexpr std::string_view op = "rope_kv_store";
  const KvGeometry g = check_kv_layer(kv, op);
  check_tensor(qkv, op, "qkv");
  check_tensor(q, op, "q");
  check_float(qkv, op, "qkv");
  check_dtype(q, qkv.dtype, op, "q");
  const int64_t hq = q.ndim == 3 ? q.dim(1) : 0;
  SERVE8_CHECK(q.ndim == 3 && qkv.ndim == 3 && qkv.dim(0) == q.dim(0) && qkv.dim(1) == hq + 2 * g.heads &&
                   qkv.dim(2) == q.dim(2),
               "{}: qkv {} and q {} for {} KV heads, expected [T, Hq + 2 Hkv, D] and [T, Hq, D]", op, qkv.shape_str(),
               q.shape_str(), g.heads);
  // The row's three parts copied apart, then rope and kv_store as they are; k goes back rotated.
  const int64_t t_count = q.dim(0), d = q.dim(2);
  const auto es = static_cast<int64_t>(dtype_size(qkv.dtype));
  const int64_t row = qkv.dim(1) * d * es, q_bytes = hq * d * es, kv_bytes = g.heads * d * es;
  std::vector<char> kb(static_cast<size_t>(t_count * kv_bytes)), vb(kb.size());
  char* src = qkv.ptr<char>();
  for (int64_t t = 0; t < t_count; ++t) {
    std::memcpy(q.ptr<char>() + t * q_bytes, src + t * row, static_cast<size_t>(q_bytes));
    std::memcpy(kb.data() + t * kv_bytes, src + t * row + q_bytes, static_cast<size_t>(kv_bytes));
    std::memcpy(vb.data() + t * kv_bytes, src + t * row + q_bytes + kv_bytes, static_cast<size_t>(kv_bytes));
  }
  const Tensor k(kb.data(), qkv.dtype, {t_count, g.heads, d}), v(vb.data(), qkv.dtype, {t_count, g.heads, d});
  rope(q, k, positions, inv_freq);
  for (int64_t t = 0; t < t_count; ++t)
    std::memcpy(src + t * row + q_bytes, kb.data() + t * kv_bytes, static_cast<size_t>(kv_bytes));
  kv_store(k, v, batch, kv);
}

void attention(const Tensor& q, const KvLayer& kv, const DeviceBatch& batch, float softmax_scale, Tensor out) {
  constexpr std::string_view op = "attention";
  AttentionArgs a{};
  a.g = check_kv_layer(kv, op);
  check_tensor(q, op, "q");
  check_float(q, op, "q");
  check_float(out, op, "out");
  SERVE8_CHECK(q.ndim == 3 && q.dim(2) == a.g.head_dim, "{}: q has shape {}, expected [T, Hq, {}]", op, q.shape_str(),
               a.g.head_dim);
  a.t_count = q.dim(0);
  a.q_heads = q.dim(1);
  SERVE8_CHECK(a.q_heads > 0 && a.q_heads % a.g.heads == 0, "{}: {} q heads is not a multiple of {} kv heads", op,
               a.q_heads, a.g.heads);
  a.group = a.q_heads / a.g.heads;
  check_shape(out, {a.t_count, a.q_heads, a.g.head_dim}, op, "out");
  SERVE8_CHECK(std::isfinite(softmax_scale), "{}: softmax_scale is {}", op, softmax_scale);
  SERVE8_CHECK(batch.num_tokens == a.t_count, "{}: q has {} tokens but the batch {}", op, a.t_count, batch.num_tokens);

  const int64_t b_count = batch.num_seqs;
  for (const auto& [t, name] : {std::pair{&batch.qo_indptr, "qo_indptr"}, std::pair{&batch.kv_indptr, "kv_indptr"}}) {
    check_dtype(*t, DType::kI32, op, name);
    check_shape(*t, {b_count + 1}, op, name);
  }
  check_dtype(batch.kv_indices, DType::kI32, op, "kv_indices");
  a.qo_indptr = batch.qo_indptr.ptr<const int32_t>();
  a.kv_indptr = batch.kv_indptr.ptr<const int32_t>();
  a.kv_indices = batch.kv_indices.ptr<const int32_t>();
  SERVE8_CHECK(a.qo_indptr[0] == 0 && a.kv_indptr[0] == 0 && a.qo_indptr[b_count] == a.t_count &&
                   batch.kv_indices.ndim == 1 && batch.kv_indices.dim(0) >= a.kv_indptr[b_count],
               "{}: indptrs end at {} (qo) and {} (kv) for {} tokens and {} kv indices", op, a.qo_indptr[b_count],
               a.kv_indptr[b_count], a.t_count, batch.kv_indices.dim(0));
  a.seq_of_token.resize(static_cast<size_t>(a.t_count));
  for (int64_t b = 0; b < b_count; ++b) {
    const int64_t q_len = a.qo_indptr[b + 1] - a.qo_indptr[b];
    const int64_t kv_len = a.kv_indptr[b + 1] - a.kv_indptr[b];
    SERVE8_CHECK(q_len >= 1 && kv_len >= q_len, "{}: sequence {} has {} new tokens and {} kv tokens", op, b, q_len,
                 kv_len);
    a.max_kv_len = std::max(a.max_kv_len, kv_len);
    for (int64_t t = a.qo_indptr[b]; t < a.qo_indptr[b + 1]; ++t)
      a.seq_of_token[static_cast<size_t>(t)] = static_cast<int32_t>(b);
  }
  check_slots(a.kv_indices, a.kv_indptr[b_count], a.g.num_slots, op, "kv_indices");
  if (a.t_count == 0) return;
  a.q = &q;
  a.out = out;
  a.kv = &kv;
  a.softmax_scale = softmax_scale;
  dispatch_kv(kv.k.dtype, op, [&]<typename S>() { attention_impl<S>(a); });
}

}  // namespace serve8::cpu
