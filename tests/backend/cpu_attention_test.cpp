// The CPU backend's KV pool, kv_store and paged attention: bit-exact stores in every KV dtype, and
// attention over ragged batches (decode, extend over a cached prefix, full prefill) with permuted
// slots against a double-precision reference that dequantizes the same stored bytes.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <tuple>
#include <vector>

#include "attention_dump.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/kv_layout.h"
#include "backend_test_util.h"
#include "core/error.h"

namespace serve8 {
namespace {

using test::HostArray;
using test::Rng;
using test::view_of;

constexpr DType kKvDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kFP8E5M2, DType::kFP8E4M3};
// Attention reads every one of them, and int8 and int4 with their rows' scales.
constexpr DType kAttentionKvDTypes[] = {DType::kF32,     DType::kBF16, DType::kF16, DType::kFP8E5M2,
                                        DType::kFP8E4M3, DType::kI8,   DType::kI4};

// The stored value of pool element i, decoded but not scaled.
float stored(const Tensor& pool, int64_t i) {
  return HostArray::decode(pool.dtype, static_cast<const uint8_t*>(pool.data) + i * dtype_size(pool.dtype));
}

// Sylvester's Hadamard matrix of order n (a power of two), orthonormal: H[i][j] =
// (-1)^popcount(i & j) / sqrt(n). Written out, not the backend's fast transform.
double hadamard_entry(int64_t i, int64_t j, int64_t n) {
  return (std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(static_cast<double>(n));
}

// H x, with H written out (its own inverse).
std::vector<double> times_hadamard(const std::vector<double>& x) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<double> y(x.size(), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) y[static_cast<size_t>(i)] += hadamard_entry(i, j, n) * x[static_cast<size_t>(j)];
  return y;
}

// The int4 code of logical element i of a pool: element 2j in byte j's low nibble, 2j + 1 in its high.
int int4_code(const Tensor& pool, int64_t i) {
  const uint8_t b = static_cast<const uint8_t*>(pool.data)[i / 2];
  return i % 2 ? b >> 4 : b & 15;
}

// The pool row of (slot, head), as KvLayer documents it: pages of 16 slots, in a page each head's
// 16 rows together.
int64_t pool_row(int64_t slot, int64_t head, int64_t heads) { return ((slot / 16) * heads + head) * 16 + slot % 16; }

// The row of head_dim d of (slot, head), before the head's scale and mean: decoded, and for int8 /
// int4 with its row's scale (and minimum) and the rotation undone.
std::vector<double> stored_row(const Tensor& pool, const Tensor& row_params, bool is_v, int64_t slot, int64_t head,
                               int64_t d) {
  const int64_t record = pool_row(slot, head, pool.dim(1)), base = record * d;
  std::vector<double> r(static_cast<size_t>(d));
  if (pool.dtype == DType::kI4) {
    const uint16_t* p = row_params.ptr<const uint16_t>() + 4 * record + (is_v ? 2 : 0);
    for (int64_t e = 0; e < d; ++e)
      r[static_cast<size_t>(e)] = f16_to_f32(p[1]) + int4_code(pool, base + e) * double{f16_to_f32(p[0])};
  } else {
    for (int64_t e = 0; e < d; ++e) r[static_cast<size_t>(e)] = stored(pool, base + e);
  }
  if (!kv_dtype_is_rotated(pool.dtype)) return r;
  if (pool.dtype == DType::kI8)
    for (double& x : r) x *= f16_to_f32(row_params.ptr<const uint16_t>()[2 * record + (is_v ? 1 : 0)]);
  return times_hadamard(r);
}

// Row (token i, head h) of src [T, heads, d], less the head's mean (none when mean is empty), over
// the head's scale, rotated: what a rotated pool rounds and stores.
std::vector<double> rotated_row(const std::vector<float>& src, const std::vector<float>& mean, int64_t i, int64_t h,
                                int64_t heads, int64_t d, double scale) {
  std::vector<double> x(static_cast<size_t>(d));
  for (int64_t c = 0; c < d; ++c)
    x[static_cast<size_t>(c)] = (src[static_cast<size_t>((i * heads + h) * d + c)] -
                                 (mean.empty() ? 0.0 : mean[static_cast<size_t>(h * d + c)])) /
                                scale;
  return times_hadamard(x);
}

// The value a K or V row stands for: stored_row times the head's scale, plus the head's mean.
std::vector<double> row_value(const KvLayer& l, bool is_v, int64_t slot, int64_t head, int64_t d) {
  std::vector<double> x = stored_row(is_v ? l.v : l.k, l.row_params, is_v, slot, head, d);
  const double s = (is_v ? l.v_scale : l.k_scale).ptr<const float>()[head];
  const Tensor& mean = is_v ? l.v_mean : l.k_mean;
  for (int64_t e = 0; e < d; ++e)
    x[static_cast<size_t>(e)] =
        x[static_cast<size_t>(e)] * s + (mean.data ? mean.ptr<const float>()[head * d + e] : 0.0);
  return x;
}

// means: also a K and V mean per head of width head_dim (what int8 / int4 rows centre on).
KvScales random_scales(Rng& rng, int layers, int heads, int head_dim = 0) {
  KvScales s;
  for (int i = 0; i < layers * heads; ++i) {
    s.k.push_back(rng.uniform(0.25f, 4.0f));
    s.v.push_back(rng.uniform(0.25f, 4.0f));
  }
  s.k_mean = rng.normals(static_cast<size_t>(layers * heads * head_dim), 3.0f);
  s.v_mean = rng.normals(static_cast<size_t>(layers * heads * head_dim), 1.0f);
  return s;
}

TEST(CpuKvCacheTest, GeometryAndScales) {
  auto be = create_cpu_backend();
  Rng rng(7);
  for (DType t : kKvDTypes) {
    const KvCacheConfig cfg{3, 2, 16, t, 40};
    const KvScales s = random_scales(rng, 3, 2);
    auto cache = be->create_kv_cache(cfg, s);
    EXPECT_EQ(cache->config().dtype, t);
    const KvLayer l = cache->layer(2);
    EXPECT_EQ(l.k.dtype, t);
    EXPECT_EQ(l.k.shape_str(), "[3, 2, 16, 16]");  // 40 slots stored as 3 whole pages of 16
    EXPECT_EQ(l.v.shape_str(), "[3, 2, 16, 16]");
    EXPECT_NE(l.k.data, cache->layer(1).k.data);
    EXPECT_NE(l.k.data, l.v.data);
    const auto* bytes = static_cast<const uint8_t*>(l.v.data);
    for (size_t i = 0; i < l.v.nbytes(); ++i) ASSERT_EQ(bytes[i], 0);
    EXPECT_EQ(l.k_scale.ptr<float>()[1], s.k[5]);
    EXPECT_EQ(l.v_scale.ptr<float>()[0], s.v[4]);
    // set_scales is visible through a KvLayer taken before it.
    const KvScales s2 = random_scales(rng, 3, 2);
    cache->set_scales(s2);
    EXPECT_EQ(l.k_scale.ptr<float>()[1], s2.k[5]);
    EXPECT_EQ(l.v_scale.ptr<float>()[0], s2.v[4]);
    EXPECT_THROW(cache->layer(3), Error);
    EXPECT_THROW(cache->set_scales(KvScales::ones(2, 2)), Error);
    KvScales bad = s2;
    bad.v[3] = 0.0f;
    EXPECT_THROW(cache->set_scales(bad), Error);
  }
  EXPECT_THROW(be->create_kv_cache({1, 2, 16, DType::kI32, 4}, KvScales::ones(1, 2)), Error);
  EXPECT_THROW(be->create_kv_cache({1, 2, 16, DType::kBF16, 4}, KvScales::ones(1, 3)), Error);
}

std::vector<int32_t> ints(const Tensor& t) {
  const auto* p = t.ptr<const int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// The request -> slot table: a first step sends whole rows, the next only the new slots, and
// kv_indices / out_slots come out of the table whole.
TEST(CpuBatchTest, UploadBatchThroughTheTable) {
  auto be = create_cpu_backend();
  KvCacheConfig cfg{1, 2, 8, DType::kF32, 40};
  cfg.max_requests = 4;
  cfg.max_context_len = 16;
  auto cache = be->create_kv_cache(cfg, KvScales::ones(1, 2));
  std::vector<int32_t> slots0(3), slots2(11);
  std::iota(slots0.begin(), slots0.end(), 1);
  std::iota(slots2.begin(), slots2.end(), 20);
  ForwardBatch fb;
  fb.add_sequence(0, 3, std::vector<int32_t>{5, 6, 7}, slots0);  // a prompt of 3
  fb.add_sequence(2, 11, std::vector<int32_t>{8}, slots2);       // a cached prefix of 10, then 1
  const DeviceBatch d = be->upload_batch(fb, *cache);
  EXPECT_EQ(d.host, &fb);
  EXPECT_EQ(d.num_seqs, 2);
  EXPECT_EQ(d.num_tokens, 4);
  EXPECT_EQ(d.max_q_len, 3);
  EXPECT_EQ(d.max_kv_len, 11);
  EXPECT_EQ(ints(d.positions), (std::vector<int32_t>{0, 1, 2, 10}));
  EXPECT_EQ(ints(d.out_slots), (std::vector<int32_t>{1, 2, 3, 30}));
  std::vector<int32_t> all = slots0;
  all.insert(all.end(), slots2.begin(), slots2.end());
  EXPECT_EQ(ints(d.kv_indices), all);
  EXPECT_EQ(ints(d.last_token_rows), (std::vector<int32_t>{2, 3}));

  // Decode: one new slot a row; the rest comes from the table.
  ForwardBatch step;
  step.add_sequence(2, 12, std::vector<int32_t>{9}, std::vector<int32_t>{35});
  step.add_sequence(0, 4, std::vector<int32_t>{4}, std::vector<int32_t>{36});
  const DeviceBatch d2 = be->upload_batch(step, *cache);
  std::vector<int32_t> want = slots2;
  want.push_back(35);
  want.insert(want.end(), slots0.begin(), slots0.end());
  want.push_back(36);
  EXPECT_EQ(ints(d2.kv_indices), want);
  EXPECT_EQ(ints(d2.out_slots), (std::vector<int32_t>{35, 36}));
  EXPECT_EQ(ints(d2.positions), (std::vector<int32_t>{11, 3}));

  ForwardBatch bad = step;
  bad.kv_indptr[1] = 0;  // fewer kv tokens than new tokens
  EXPECT_THROW(be->upload_batch(bad, *cache), Error);
  bad = step;
  bad.req_rows[0] = 5;  // past the table's rows (4 and the padding row)
  EXPECT_THROW(be->upload_batch(bad, *cache), Error);
  bad = step;
  bad.new_slots[1] = 40;  // outside the pool
  EXPECT_THROW(be->upload_batch(bad, *cache), Error);
  ForwardBatch longer;
  std::vector<int32_t> many(17, 1);
  longer.add_sequence(1, 17, std::vector<int32_t>{1}, many);  // past the context length
  EXPECT_THROW(be->upload_batch(longer, *cache), Error);
}

// A batch writing `slots` (one single sequence on table row `row`, every slot new).
ForwardBatch store_batch(const std::vector<int32_t>& slots, int32_t row = 0) {
  ForwardBatch fb;
  fb.add_sequence(row, static_cast<int>(slots.size()), std::vector<int32_t>(slots.size(), 1), slots);
  return fb;
}

TEST(CpuKvStoreTest, BitExactEveryDtype) {
  auto be = create_cpu_backend();
  Rng rng(11);
  const int64_t t = 7, heads = 3, d = 16, slots = 32;
  for (DType kv_t : kKvDTypes) {
    for (DType act_t : {DType::kF32, DType::kBF16}) {
      const KvScales scales = random_scales(rng, 1, static_cast<int>(heads));
      auto cache = be->create_kv_cache({1, static_cast<int>(heads), static_cast<int>(d), kv_t, slots}, scales);
      // Wide values so that E4M3 (448) and E5M2 (57344) saturate, plus the special values.
      std::vector<float> kv_vals = rng.normals(static_cast<size_t>(2 * t * heads * d), 300.0f);
      const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-9f, 70000.0f, -500.0f, 1e6f};
      for (size_t i = 0; i < std::size(specials); ++i) kv_vals[i * 13] = specials[i];
      for (size_t i = 3; i < kv_vals.size(); i += 7) kv_vals[i] *= 1e-4f;  // small values reach subnormals
      HostArray k(act_t, std::vector<float>(kv_vals.begin(), kv_vals.begin() + t * heads * d));
      HostArray v(act_t, std::vector<float>(kv_vals.begin() + t * heads * d, kv_vals.end()));
      std::vector<int32_t> out_slots = {5, 31, 0, 17, 2, 9, 30};
      const ForwardBatch fb = store_batch(out_slots);
      const KvLayer l = cache->layer(0);
      be->kv_store(k.view({t, heads, d}), v.view({t, heads, d}), be->upload_batch(fb, *cache), l);

      HostArray want_k(kv_t, static_cast<size_t>(slots * heads * d)), want_v = want_k;
      for (int64_t i = 0; i < t; ++i) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t j = 0; j < d; ++j) {
            const size_t src = static_cast<size_t>((i * heads + h) * d + j);
            const size_t dst = static_cast<size_t>(pool_row(out_slots[static_cast<size_t>(i)], h, heads) * d + j);
            want_k.set(dst, k.get(src) / scales.k[static_cast<size_t>(h)]);
            want_v.set(dst, v.get(src) / scales.v[static_cast<size_t>(h)]);
          }
        }
      }
      ASSERT_EQ(0, std::memcmp(want_k.bytes.data(), l.k.data, want_k.bytes.size())) << dtype_name(kv_t);
      ASSERT_EQ(0, std::memcmp(want_v.bytes.data(), l.v.data, want_v.bytes.size())) << dtype_name(kv_t);
    }
  }
}

// int8 rows: each (token, head) row of value / head scale, rotated by H, at 127 steps of its own
// fp16 scale.
TEST(CpuKvStoreTest, Int8RowsKeepTheirOwnScale) {
  auto be = create_cpu_backend();
  Rng rng(12);
  const int64_t t = 6, heads = 2, d = 16, slots = 16;
  const KvScales scales = random_scales(rng, 1, static_cast<int>(heads));
  auto cache = be->create_kv_cache({1, static_cast<int>(heads), static_cast<int>(d), DType::kI8, slots}, scales);
  EXPECT_EQ(cache->config().bytes_per_token(), size_t{2 * heads * (d + 2)});  // d codes and an fp16 scale
  std::vector<float> vals = rng.normals(static_cast<size_t>(2 * t * heads * d), 3.0f);
  for (int64_t i = 0; i < d; ++i) vals[static_cast<size_t>(i)] = 0.0f;  // token 0, head 0 of K: all zeros
  for (int64_t i = 0; i < d; ++i) vals[static_cast<size_t>((1 * heads + 1) * d + i)] *= 1e4f;  // a wide row
  std::vector<float> kv(vals.begin(), vals.begin() + t * heads * d), vv(vals.begin() + t * heads * d, vals.end());
  const std::vector<int32_t> out_slots = {3, 15, 1, 8, 4, 11};
  const KvLayer l = cache->layer(0);
  be->kv_store(view_of(kv, {t, heads, d}), view_of(vv, {t, heads, d}), be->upload_batch(store_batch(out_slots), *cache),
               l);
  for (const bool is_v : {false, true}) {
    const std::vector<float>& src = is_v ? vv : kv;
    const Tensor& pool = is_v ? l.v : l.k;
    const uint16_t* params = l.row_params.ptr<const uint16_t>();
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        const float layer = (is_v ? scales.v : scales.k)[static_cast<size_t>(h)];
        const int64_t at = pool_row(out_slots[static_cast<size_t>(i)], h, heads);
        const std::vector<double> rotated = rotated_row(src, {}, i, h, heads, d, layer);
        double amax = 0;
        for (const double x : rotated) amax = std::max(amax, std::abs(x));
        // amax / 127 to fp16's precision (2^-11 of itself).
        const float row_scale = f16_to_f32(params[2 * at + (is_v ? 1 : 0)]);
        EXPECT_NEAR(row_scale, amax / 127, 5e-4 * amax / 127) << "token " << i << " head " << h;
        int peak = 0;
        for (int64_t e = 0; e < d; ++e) {
          const double x = rotated[static_cast<size_t>(e)];
          const double q = stored(pool, at * d + e);
          peak = std::max(peak, static_cast<int>(std::abs(q)));
          // Rounded to the nearest step of the row's scale (the fast transform's fp32 rounding aside).
          EXPECT_LE(std::abs(q * row_scale - x), 0.501 * row_scale) << "token " << i << " head " << h;
        }
        EXPECT_EQ(peak, amax > 0 ? 127 : 0) << "token " << i << " head " << h;
      }
    }
  }
  // Rows no token wrote keep their zero scale.
  EXPECT_EQ(l.row_params.ptr<const uint16_t>()[0], 0);
  // The rotation needs a power-of-two head width.
  EXPECT_THROW(be->create_kv_cache({1, 2, 12, DType::kI8, 8}, KvScales::ones(1, 2)), Error);
}

// The int4 fit's trims: every (a, b) with a, b <= 3, a first, as the CPU and CUDA searches visit
// them (the lowest trim wins a tie on both).
TEST(CpuKvStoreTest, Int4TrimsAreTheirGridInOrder) {
  int t = 0;
  for (int a = 0; a <= 3; ++a) {
    for (int b = 0; b <= 3; ++b, ++t) {
      int ta = -1, tb = -1;
      int4_trim(t, ta, tb);
      EXPECT_EQ(ta, a) << "trim " << t;
      EXPECT_EQ(tb, b) << "trim " << t;
    }
  }
  EXPECT_EQ(t, kInt4Trims);
}

// int4 rows: value - head mean, over the head scale, rotated by H, as 16 codes between the row's fp16
// minimum and minimum + 15 steps; each code the nearest, and the row's squared error no more than
// with the full range (the store only narrows it where that helps).
TEST(CpuKvStoreTest, Int4RowsFitTheirOwnRange) {
  auto be = create_cpu_backend();
  Rng rng(13);
  const int64_t t = 6, heads = 2, d = 32, slots = 16;
  const KvScales scales = random_scales(rng, 1, static_cast<int>(heads), static_cast<int>(d));
  auto cache = be->create_kv_cache({1, static_cast<int>(heads), static_cast<int>(d), DType::kI4, slots}, scales);
  EXPECT_EQ(cache->config().bytes_per_token(), size_t{2 * heads * (d / 2 + 4)});
  const KvLayer l = cache->layer(0);
  EXPECT_EQ(l.k.shape_str(), "[1, 2, 16, 16]");  // one page of 16 slots, 2 heads, 16 bytes a row
  std::vector<float> vals = rng.normals(static_cast<size_t>(2 * t * heads * d), 3.0f);
  for (int64_t i = 0; i < d; ++i)
    vals[static_cast<size_t>(i)] = scales.k_mean[static_cast<size_t>(i)];                      // the mean itself
  for (int64_t i = 0; i < d; ++i) vals[static_cast<size_t>((1 * heads + 1) * d + i)] *= 1e3f;  // a wide row
  std::vector<float> kv(vals.begin(), vals.begin() + t * heads * d), vv(vals.begin() + t * heads * d, vals.end());
  const std::vector<int32_t> out_slots = {3, 15, 1, 8, 4, 11};
  be->kv_store(view_of(kv, {t, heads, d}), view_of(vv, {t, heads, d}), be->upload_batch(store_batch(out_slots), *cache),
               l);
  for (const bool is_v : {false, true}) {
    const std::vector<float>& src = is_v ? vv : kv;
    const Tensor& pool = is_v ? l.v : l.k;
    const uint16_t* params = l.row_params.ptr<const uint16_t>() + (is_v ? 2 : 0);
    const std::vector<float>& mean = is_v ? scales.v_mean : scales.k_mean;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        const float layer = (is_v ? scales.v : scales.k)[static_cast<size_t>(h)];
        const int64_t at = pool_row(out_slots[static_cast<size_t>(i)], h, heads);
        const std::vector<double> x = rotated_row(src, mean, i, h, heads, d, layer);
        const double s = f16_to_f32(params[4 * at]), lo = f16_to_f32(params[4 * at + 1]);
        const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
        const double range = *mx - *mn;
        if (range < 1e-3) {  // the row that was its head's mean: nothing left to quantize
          EXPECT_LT(std::abs(lo), 1e-3) << "token " << i << " head " << h;
          continue;
        }
        // The range kept lies within the row's, trimmed by at most 6% at each end (kv_layout.h's
        // trims; 1e-3 for the fp16 parameters).
        EXPECT_GE(lo, *mn - 1e-3 * range);
        EXPECT_LE(lo, *mn + (0.06 + 1e-3) * range);
        EXPECT_LE(lo + 15 * s, *mx + 1e-3 * range);
        EXPECT_GE(lo + 15 * s, *mx - (0.06 + 1e-3) * range);
        EXPECT_GE(15 * s, (0.88 - 1e-3) * range);
        double err = 0, full_err = 0;
        const double fs = range / 15;
        for (int64_t e = 0; e < d; ++e) {
          const double xe = x[static_cast<size_t>(e)];
          const int code = int4_code(pool, at * d + e);
          const int nearest = static_cast<int>(std::clamp(std::nearbyint((xe - lo) / s), 0.0, 15.0));
          EXPECT_LE(std::abs(code - nearest), xe - lo == (nearest - 0.5) * s ? 1 : 0) << "element " << e;
          err += std::pow(lo + code * s - xe, 2);
          full_err += std::pow(*mn + std::clamp(std::nearbyint((xe - *mn) / fs), 0.0, 15.0) * fs - xe, 2);
        }
        EXPECT_LE(err, full_err * 1.01 + 1e-9 * range * range) << "token " << i << " head " << h;
      }
    }
  }
  // The rotation needs a power-of-two head width.
  EXPECT_THROW(be->create_kv_cache({1, 2, 24, DType::kI4, 8}, KvScales::ones(1, 2)), Error);
}

TEST(CpuKvStoreTest, RejectsBadSlotsAndShapes) {
  auto be = create_cpu_backend();
  auto cache = be->create_kv_cache({1, 2, 8, DType::kFP8E4M3, 4}, KvScales::ones(1, 2));
  std::vector<float> k(2 * 2 * 8), v(2 * 2 * 8);
  const ForwardBatch bad = store_batch({1, 4});
  EXPECT_THROW(
      be->kv_store(view_of(k, {2, 2, 8}), view_of(v, {2, 2, 8}), be->upload_batch(bad, *cache), cache->layer(0)),
      Error);
  const ForwardBatch ok = store_batch({1, 3});
  EXPECT_THROW(
      be->kv_store(view_of(k, {2, 4, 4}), view_of(v, {2, 2, 8}), be->upload_batch(ok, *cache), cache->layer(0)), Error);
}

// (q_len, kv_len) of each sequence: decode, extend over a cached prefix, full prefill, a
// one-token sequence, and a longer extend.
const std::vector<std::pair<int, int>> kSeqs = {{1, 37}, {5, 20}, {9, 9}, {1, 1}, {3, 64}};

struct AttentionSetup {
  ForwardBatch step;
  std::vector<int32_t> kv_slots;  // every sequence's slots, CSR over step.kv_indptr (the reference's)
  std::vector<float> q;           // [T, Hq, D]
};

// Fills a pool with each sequence's cached prefix and the step's new tokens (through kv_store),
// over a random permutation of the slots, and returns the step's batch and queries. The prefix
// goes in through a batch of its own on each row, so the step sends only its new tokens' slots.
AttentionSetup fill_pool(Backend& be, KvCache& cache, const KvLayer& l, Rng& rng, int64_t hq, int64_t hkv, int64_t d,
                         int64_t num_slots) {
  std::vector<int32_t> perm(static_cast<size_t>(num_slots - 1));
  std::iota(perm.begin(), perm.end(), 1);  // slot 0 stays the allocator's reserved slot
  std::shuffle(perm.begin(), perm.end(), rng.gen());
  AttentionSetup s;
  s.step.clear();
  const auto store = [&](const ForwardBatch& b) {
    const auto n = static_cast<int64_t>(b.num_tokens());
    std::vector<float> k = rng.normals(static_cast<size_t>(n * hkv * d), 2.0f);
    std::vector<float> v = rng.normals(static_cast<size_t>(n * hkv * d), 2.0f);
    be.kv_store(view_of(k, {n, hkv, d}), view_of(v, {n, hkv, d}), be.upload_batch(b, cache), l);
  };
  size_t next = 0;
  int32_t row = 0;
  for (const auto& [q_len, kv_len] : kSeqs) {
    std::vector<int32_t> slots(perm.begin() + static_cast<int64_t>(next),
                               perm.begin() + static_cast<int64_t>(next) + kv_len);
    next += static_cast<size_t>(kv_len);
    s.kv_slots.insert(s.kv_slots.end(), slots.begin(), slots.end());
    const int prefix = kv_len - q_len;
    if (prefix > 0) store(store_batch(std::vector<int32_t>(slots.begin(), slots.begin() + prefix), row));
    std::vector<int32_t> tokens(static_cast<size_t>(q_len));
    for (int32_t& t : tokens) t = rng.integer(0, 999);
    s.step.add_sequence(row, kv_len, tokens, std::vector<int32_t>(slots.begin() + prefix, slots.end()));
    ++row;
  }
  store(s.step);
  s.q = rng.normals(s.step.tokens.size() * static_cast<size_t>(hq * d), 1.5f);
  return s;
}

// Causal softmax attention in double over the dequantized stored bytes.
std::vector<double> attention_ref(const std::vector<float>& q, const KvLayer& l, const AttentionSetup& s, int64_t hq,
                                  int64_t hkv, int64_t d, double softmax_scale) {
  const ForwardBatch& fb = s.step;
  std::vector<double> out(q.size());
  const int64_t group = hq / hkv;
  for (int b = 0; b < fb.num_seqs(); ++b) {
    const int q_len = fb.qo_indptr[b + 1] - fb.qo_indptr[b], kv_len = fb.kv_indptr[b + 1] - fb.kv_indptr[b];
    for (int i = 0; i < q_len; ++i) {
      const int64_t t = fb.qo_indptr[b] + i;
      const int n = kv_len - q_len + i + 1;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / group;
        std::vector<double> p(static_cast<size_t>(n));
        for (int j = 0; j < n; ++j) {
          const std::vector<double> k = row_value(l, false, s.kv_slots[static_cast<size_t>(fb.kv_indptr[b] + j)], g, d);
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[static_cast<size_t>((t * hq + h) * d + e)] * k[static_cast<size_t>(e)];
          p[static_cast<size_t>(j)] = dot * softmax_scale;
        }
        const double m = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - m));
        for (int j = 0; j < n; ++j) {
          const std::vector<double> v = row_value(l, true, s.kv_slots[static_cast<size_t>(fb.kv_indptr[b] + j)], g, d);
          for (int64_t e = 0; e < d; ++e)
            out[static_cast<size_t>((t * hq + h) * d + e)] +=
                p[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(e)];
        }
      }
    }
  }
  return out;
}

class CpuAttentionTest : public ::testing::TestWithParam<std::tuple<int, int, DType>> {};

TEST_P(CpuAttentionTest, RaggedBatchMatchesReference) {
  const auto [group, head_dim, kv_t] = GetParam();
  const int64_t hkv = 2, hq = hkv * group, d = head_dim, num_slots = 200;
  auto be = create_cpu_backend();
  Rng rng(static_cast<uint64_t>(group * 1000 + head_dim * 10 + static_cast<int>(kv_t)));
  // The rotated formats centre rows on means: the reference adds them back, so a K mean must leave
  // softmax as it is and a V mean come back in the output.
  auto cache = be->create_kv_cache({2, static_cast<int>(hkv), head_dim, kv_t, num_slots},
                                   random_scales(rng, 2, 2, kv_dtype_is_rotated(kv_t) ? head_dim : 0));
  const KvLayer l = cache->layer(1);
  AttentionSetup s = fill_pool(*be, *cache, l, rng, hq, hkv, d, num_slots);
  const auto t = static_cast<int64_t>(s.step.tokens.size());
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const DeviceBatch batch = be->upload_batch(s.step, *cache);
  std::vector<float> out(s.q.size());
  be->attention(view_of(s.q, {t, hq, d}), l, batch, softmax_scale, view_of(out, {t, hq, d}));
  // For scripts/torch_attention_check.py (checked here with its numpy path), when
  // SERVE8_ATTENTION_DUMP_DIR is set; the bf16 case below is the CUDA tests' format.
  std::string name = "cpu_group" + std::to_string(group);
  name += "_d" + std::to_string(head_dim);
  name += "_" + std::string(dtype_name(kv_t));
  if (!kv_dtype_is_rotated(kv_t))  // the dump's readers know the pool formats without row scales
    test::dump_attention_case(*be, name + "_qf32", view_of(s.q, {t, hq, d}), l, batch, softmax_scale,
                              view_of(out, {t, hq, d}));
  const std::vector<double> want = attention_ref(s.q, l, s, hq, hkv, d, softmax_scale);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(out[i], want[i], 2e-5 * std::max(1.0, std::abs(want[i]))) << "element " << i;
  }

  // Results do not depend on the thread count.
  const int threads = omp_get_max_threads();
  std::vector<float> out1(out.size());
  omp_set_num_threads(1);
  be->attention(view_of(s.q, {t, hq, d}), l, batch, softmax_scale, view_of(out1, {t, hq, d}));
  omp_set_num_threads(3);
  be->attention(view_of(s.q, {t, hq, d}), l, batch, softmax_scale, view_of(out, {t, hq, d}));
  omp_set_num_threads(threads);
  EXPECT_EQ(0, std::memcmp(out.data(), out1.data(), out.size() * sizeof(float)));

  // bf16 queries and output: the reference sees the same rounded queries; one bf16 rounding apart.
  HostArray qb(DType::kBF16, s.q), ob(DType::kBF16, s.q.size());
  be->attention(qb.view({t, hq, d}), l, batch, softmax_scale, ob.view({t, hq, d}));
  if (!kv_dtype_is_rotated(kv_t))
    test::dump_attention_case(*be, name + "_qbf16", qb.view({t, hq, d}), l, batch, softmax_scale, ob.view({t, hq, d}));
  const std::vector<double> want_b = attention_ref(qb.values(), l, s, hq, hkv, d, softmax_scale);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_NEAR(ob.get(i), want_b[i], std::max(1.0, std::abs(want_b[i])) / 128) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllShapes, CpuAttentionTest,
                         ::testing::Combine(::testing::Values(1, 2, 4, 8), ::testing::Values(8, 64, 128),
                                            ::testing::ValuesIn(kAttentionKvDTypes)),
                         [](const auto& info) {
                           return "group" + std::to_string(std::get<0>(info.param)) + "_d" +
                                  std::to_string(std::get<1>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<2>(info.param)));
                         });

TEST(CpuAttentionErrors, RejectsMismatches) {
  auto be = create_cpu_backend();
  auto cache = be->create_kv_cache({1, 2, 8, DType::kBF16, 16}, KvScales::ones(1, 2));
  ForwardBatch fb = store_batch({1, 2, 3});
  const DeviceBatch batch = be->upload_batch(fb, *cache);
  std::vector<float> q(3 * 6 * 8), out(q.size());
  // 6 q heads over 2 kv heads is fine; 5 is not a multiple, and head_dim must match the pool.
  EXPECT_NO_THROW(be->attention(view_of(q, {3, 6, 8}), cache->layer(0), batch, 0.3f, view_of(out, {3, 6, 8})));
  EXPECT_THROW(be->attention(view_of(q, {3, 5, 8}), cache->layer(0), batch, 0.3f, view_of(out, {3, 5, 8})), Error);
  EXPECT_THROW(be->attention(view_of(q, {3, 12, 4}), cache->layer(0), batch, 0.3f, view_of(out, {3, 12, 4})), Error);
  fb.new_slots[1] = 16;  // outside the pool
  EXPECT_THROW(be->attention(view_of(q, {3, 6, 8}), cache->layer(0), be->upload_batch(fb, *cache), 0.3f,
                             view_of(out, {3, 6, 8})),
               Error);
}

}  // namespace
}  // namespace serve8
