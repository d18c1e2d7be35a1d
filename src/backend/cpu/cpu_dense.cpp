// The token-parallel ops of the CPU backend: embedding, RMSNorm, GEMM (OpenBLAS), RoPE, SiLU·mul
// and row gathers. Each works on fp32 rows (converting bf16/fp16 at the edges), one row per
// OpenMP iteration, so results do not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace serve8::cpu {

namespace {

// A row count and its width for a tensor seen as [rows, width] with width its last dimension.
int64_t rows_of(const Tensor& t) { return t.ndim == 0 || t.dim(-1) == 0 ? 0 : t.numel() / t.dim(-1); }

// out = x * rsqrt(mean(x^2) + eps) * weight for one row. The sum of squares is accumulated in
// double: cheap, and it keeps the reference well clear of the fp32 kernels' rounding.
void rmsnorm_row(const float* x, const float* w, int64_t h, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < h; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + static_cast<double>(eps)));
  for (int64_t i = 0; i < h; ++i) out[i] = w[i] * (inv * x[i]);
}

void check_rmsnorm_args(const Tensor& x, const Tensor& weight, const Tensor& out, std::string_view op) {
  check_tensor(x, op, "x");
  check_float(x, op, "x");
  check_float(weight, op, "weight");
  check_float(out, op, "out");
  SERVE8_CHECK(x.ndim == 2, "{}: x has shape {}, expected [T, H]", op, x.shape_str());
  check_shape(weight, {x.dim(1)}, op, "weight");
  check_shape(out, {x.dim(0), x.dim(1)}, op, "out");
}

std::vector<float> to_f32_vector(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  load_f32(t, 0, t.numel(), v.data());
  return v;
}

// out[m, n] = x[m, k] · w[n, k]^T, one matrix-vector product per row. A row's result must not
// depend on which other rows share the call: sgemm picks its micro-kernel by the size and position
// of the row block, so a token's K could round differently in a batch than alone (seen: greedy ids
// of a bf16-KV request diverged between batched and alone). gemv computes every output element
// with the same reduction order whatever m is, which makes the CPU engine batch invariant.
void sgemm_nt(int64_t m, int64_t n, int64_t k, const float* x, const float* w, float* out, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, w,
                static_cast<blasint>(k), x + i * k, 1, 0.0f, out + i * ldc, 1);
  }
}

}  // namespace

void gemm_f32_out(int64_t m, int64_t n, int64_t k, const float* x, const Tensor& w, float* out) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::memset(out, 0, static_cast<size_t>(m * n) * sizeof(float));
  } else if (w.dtype == DType::kF32) {
    sgemm_nt(m, n, k, x, w.ptr<const float>(), out, n);
  } else {
    // Narrow weights are widened a block of rows at a time, so the temporary stays small (4 MiB,
    // cache-sized) even for an LM head.
    const int64_t rows_per_block = std::max<int64_t>(1, (int64_t{1} << 20) / k);
    std::vector<float> wbuf(static_cast<size_t>(std::min(n, rows_per_block) * k));
    dispatch_kv(w.dtype, "gemm", [&]<typename T>() {
      if constexpr (std::is_same_v<T, Int4Pair> || std::is_same_v<T, int8_t>) {
        fail("gemm: {} is a KV format, not a weight dtype", dtype_name(w.dtype));
      } else {
        for (int64_t n0 = 0; n0 < n; n0 += rows_per_block) {
          const int64_t nb = std::min(rows_per_block, n - n0);
          const T* src = w.ptr<const T>() + n0 * k;
#pragma omp parallel for schedule(static) if (nb * k >= kParallelMinElements)
          for (int64_t i = 0; i < nb * k; ++i) wbuf[static_cast<size_t>(i)] = to_f32(src[i]);
          sgemm_nt(m, nb, k, x, wbuf.data(), out + n0, n);
        }
      }
    });
  }
}

namespace {

// out[t] = table[ids[t] - first_id]. A whole table (shard == false) takes every id or throws; a
// vocabulary shard writes zeros for the ids other ranks hold.
void embedding_rows(const Tensor& table, const Tensor& ids, int64_t first_id, bool shard, Tensor out) {
  constexpr std::string_view op = "embedding";
  check_tensor(table, op, "table");
  check_float(table, op, "table");
  check_float(out, op, "out");
  check_dtype(ids, DType::kI32, op, "ids");
  SERVE8_CHECK(table.ndim == 2, "{}: table has shape {}, expected [V, H]", op, table.shape_str());
  SERVE8_CHECK(ids.ndim == 1, "{}: ids has shape {}, expected [T]", op, ids.shape_str());
  check_tensor(ids, op, "ids");
  const int64_t t_count = ids.dim(0), vocab = table.dim(0), h = table.dim(1);
  check_shape(out, {t_count, h}, op, "out");
  const int32_t* id = ids.ptr<const int32_t>();
  for (int64_t t = 0; t < t_count && !shard; ++t) {
    SERVE8_CHECK(id[t] >= 0 && id[t] < vocab, "{}: token id {} at row {} is outside the vocabulary [0, {})", op, id[t],
                 t, vocab);
  }
#pragma omp parallel if (t_count * h >= kParallelMinElements)
  {
    std::vector<float> row(static_cast<size_t>(h));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < t_count; ++t) {
      const int64_t r = id[t] - first_id;
      if (r >= 0 && r < vocab) {
        load_f32(table, r * h, h, row.data());
      } else {
        std::fill(row.begin(), row.end(), 0.0f);
      }
      store_f32(row.data(), h, out, t * h);
    }
  }
}

}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor out) { embedding_rows(table, ids, 0, false, out); }

void embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out) {
  embedding_rows(table, ids, first_id, true, out);
}

void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor out) {
  check_rmsnorm_args(x, weight, out, "rmsnorm");
  const int64_t t_count = x.dim(0), h = x.dim(1);
  const std::vector<float> w = to_f32_vector(weight);
#pragma omp parallel if (t_count * h >= kParallelMinElements)
  {
    std::vector<float> row(static_cast<size_t>(h)), res(static_cast<size_t>(h));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < t_count; ++t) {
      load_f32(x, t * h, h, row.data());
      rmsnorm_row(row.data(), w.data(), h, eps, res.data());
      store_f32(res.data(), h, out, t * h);
    }
  }
}

void add_rmsnorm(const Tensor& x, Tensor residual, const Tensor& weight, float eps, Tensor out) {
  constexpr std::string_view op = "add_rmsnorm";
  check_rmsnorm_args(x, weight, out, op);
  check_float(residual, op, "residual");
  check_shape(residual, {x.dim(0), x.dim(1)}, op, "residual");
  const int64_t t_count = x.dim(0), h = x.dim(1);
  const std::vector<float> w = to_f32_vector(weight);
#pragma omp parallel if (t_count * h >= kParallelMinElements)
  {
    std::vector<float> row(static_cast<size_t>(h)), sum(static_cast<size_t>(h)), res(static_cast<size_t>(h));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < t_count; ++t) {
      load_f32(x, t * h, h, row.data());
      load_f32(residual, t * h, h, sum.data());
      for (int64_t i = 0; i < h; ++i) sum[static_cast<size_t>(i)] += row[static_cast<size_t>(i)];
      store_f32(sum.data(), h, residual, t * h);
      // Normalize what the residual stream now holds (rounded to its dtype), as the unfused pair would.
      load_f32(residual, t * h, h, sum.data());
      rmsnorm_row(sum.data(), w.data(), h, eps, res.data());
      store_f32(res.data(), h, out, t * h);
    }
  }
}

void check_blas_gemm(std::string_view op, int64_t m, int64_t n, int64_t k, const Tensor* bias) {
  SERVE8_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "{}: dimensions M={} N={} K={} exceed OpenBLAS's int", op,
               m, n, k);
  if (bias) {
    check_float(*bias, op, "bias");
    check_shape(*bias, {n}, op, "bias");
  }
}

void gemm(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor out) {
  constexpr std::string_view op = "gemm";
  check_tensor(x, op, "x");
  check_tensor(w, op, "w");
  check_tensor(out, op, "out");
  check_float(x, op, "x");
  check_float(w, op, "w");
  check_float(out, op, "out");
  SERVE8_CHECK(w.ndim == 2, "{}: w has shape {}, expected [N, K]", op, w.shape_str());
  const int64_t n = w.dim(0), k = w.dim(1);
  SERVE8_CHECK(x.dim(-1) == k, "{}: x {} and w {} disagree on K", op, x.shape_str(), w.shape_str());
  const int64_t m = rows_of(x);
  SERVE8_CHECK(out.dim(-1) == n && out.numel() == m * n, "{}: out has shape {}, expected [{}, {}]", op, out.shape_str(),
               m, n);
  check_blas_gemm(op, m, n, k, bias);
  if (m == 0 || n == 0) return;

  std::vector<float> xbuf;
  const float* xf = x.ptr<const float>();
  if (x.dtype != DType::kF32) {
    xbuf.resize(static_cast<size_t>(m * k));
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinElements)
    for (int64_t i = 0; i < m; ++i) load_f32(x, i * k, k, xbuf.data() + i * k);
    xf = xbuf.data();
  }
  std::vector<float> obuf;
  float* of = out.ptr<float>();
  if (out.dtype != DType::kF32) {
    obuf.resize(static_cast<size_t>(m * n));
    of = obuf.data();
  }

  gemm_f32_out(m, n, k, xf, w, of);

  std::vector<float> b;
  if (bias) b = to_f32_vector(*bias);
#pragma omp parallel for schedule(static) if (m * n >= kParallelMinElements)
  for (int64_t i = 0; i < m; ++i) {
    float* row = of + i * n;
    if (!b.empty()) {
      for (int64_t j = 0; j < n; ++j) row[j] += b[static_cast<size_t>(j)];
    }
    if (out.dtype != DType::kF32) store_f32(row, n, out, i * n);
  }
}

void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) {
  constexpr std::string_view op = "rope";
  check_tensor(q, op, "q");
  check_tensor(k, op, "k");
  check_float(q, op, "q");
  check_float(k, op, "k");
  SERVE8_CHECK(q.ndim == 3 && k.ndim == 3, "{}: q {} and k {} must be [T, heads, D]", op, q.shape_str(), k.shape_str());
  const int64_t t_count = q.dim(0), d = q.dim(2), half = d / 2;
  SERVE8_CHECK(k.dim(0) == t_count && k.dim(2) == d && d % 2 == 0, "{}: q {} and k {} disagree (T, even D)", op,
               q.shape_str(), k.shape_str());
  check_dtype(positions, DType::kI32, op, "positions");
  check_shape(positions, {t_count}, op, "positions");
  check_dtype(inv_freq, DType::kF32, op, "inv_freq");
  check_shape(inv_freq, {half}, op, "inv_freq");
  const int32_t* pos = positions.ptr<const int32_t>();
  const float* freq = inv_freq.ptr<const float>();

  // The angle is float(pos) * inv_freq in fp32 and cosf/sinf of it, as llama2.c's run.c and the
  // CUDA kernel compute it, so the rotations agree to the last bit where the libm agrees.
  std::vector<float> cs(static_cast<size_t>(t_count * d));
#pragma omp parallel for schedule(static) if (t_count * q.dim(1) * q.dim(2) >= kParallelMinElements)
  for (int64_t t = 0; t < t_count; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[t]) * freq[i];
      cs[static_cast<size_t>(t * d + i)] = cosf(angle);
      cs[static_cast<size_t>(t * d + half + i)] = sinf(angle);
    }
  }
  for (Tensor* x : {&q, &k}) {
    const int64_t heads = x->dim(1);
#pragma omp parallel if (x->numel() >= kParallelMinElements)
    {
      std::vector<float> row(static_cast<size_t>(d));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < t_count * heads; ++r) {
        const float* c = cs.data() + (r / heads) * d;
        const float* s = c + half;
        load_f32(*x, r * d, d, row.data());
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = row[static_cast<size_t>(i)], x1 = row[static_cast<size_t>(i + half)];
          row[static_cast<size_t>(i)] = x0 * c[i] - x1 * s[i];
          row[static_cast<size_t>(i + half)] = x0 * s[i] + x1 * c[i];
        }
        store_f32(row.data(), d, *x, r * d);
      }
    }
  }
}

void silu_mul(const Tensor& gate_up, Tensor out) {
  constexpr std::string_view op = "silu_mul";
  check_tensor(gate_up, op, "gate_up");
  check_float(gate_up, op, "gate_up");
  check_float(out, op, "out");
  SERVE8_CHECK(gate_up.ndim == 2 && gate_up.dim(1) % 2 == 0, "{}: gate_up has shape {}, expected [T, 2I]", op,
               gate_up.shape_str());
  const int64_t t_count = gate_up.dim(0), inter = gate_up.dim(1) / 2;
  check_shape(out, {t_count, inter}, op, "out");
#pragma omp parallel if (t_count * inter >= kParallelMinElements)
  {
    std::vector<float> row(static_cast<size_t>(2 * inter)), res(static_cast<size_t>(inter));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < t_count; ++t) {
      load_f32(gate_up, t * 2 * inter, 2 * inter, row.data());
      for (int64_t i = 0; i < inter; ++i) {
        const float g = row[static_cast<size_t>(i)];
        // Written as run.c writes it: g * (1 / (1 + e^-g)), then times up.
        res[static_cast<size_t>(i)] = g * (1.0f / (1.0f + expf(-g))) * row[static_cast<size_t>(inter + i)];
      }
      store_f32(res.data(), inter, out, t * inter);
    }
  }
}

void gather_rows(const Tensor& x, const Tensor& rows, Tensor out) {
  constexpr std::string_view op = "gather_rows";
  check_tensor(x, op, "x");
  check_tensor(out, op, "out");
  check_tensor(rows, op, "rows");
  check_dtype(rows, DType::kI32, op, "rows");
  SERVE8_CHECK(rows.ndim == 1, "{}: rows has shape {}, expected [M]", op, rows.shape_str());
  SERVE8_CHECK(out.dtype == x.dtype, "{}: out is {} but x is {}", op, dtype_name(out.dtype), dtype_name(x.dtype));
  const int64_t m = rows.dim(0), n = x.dim(0);
  SERVE8_CHECK(out.dim(0) == m && out.row_size() == x.row_size(), "{}: out {} cannot hold {} rows of x {}", op,
               out.shape_str(), m, x.shape_str());
  const int32_t* r = rows.ptr<const int32_t>();
  for (int64_t i = 0; i < m; ++i) {
    SERVE8_CHECK(r[i] >= 0 && r[i] < n, "{}: row index {} at {} is outside [0, {})", op, r[i], i, n);
  }
  const size_t row_bytes = static_cast<size_t>(x.row_size()) * dtype_size(x.dtype);
  const char* src = static_cast<const char*>(x.data);
  char* dst = static_cast<char*>(out.data);
  for (int64_t i = 0; i < m; ++i)
    std::memcpy(dst + static_cast<size_t>(i) * row_bytes, src + r[i] * row_bytes, row_bytes);
}

}  // namespace serve8::cpu
