// Token sampling on the CPU. The procedure below is the contract every serve8 sampler implements
// (the CUDA sampler included), so that a request with a fixed (seed, step) draws the same token on
// either backend up to the rounding of the sums.
//
// For each row of logits [B, V] (fp32), independently:
//  1. temperature == 0: greedy, the largest logit, the lowest id among equal maxima. NaN logits are
//     never picked; a row with no logit above -inf gives the lowest id whose logit is not NaN, or 0.
//  2. Otherwise z_i = logit_i / temperature (fp32), m = max_i z_i, and the unnormalized
//     probabilities are e_i = expf(z_i - m) in fp32, with e_i = 1 where z_i == m (so a +inf logit
//     works) and e_i = 0 for NaN. The most probable token has e = 1 exactly. Z = sum of all e_i.
//  3. Sort the tokens by e descending, ties by lower id first (a stable descending sort over ids in
//     order). Tokens with e_i == 0 can never be drawn and are dropped.
//  4. Filters, all measured on the full softmax p_i = e_i / Z and never renormalized in between, so
//     each is a cut of the sorted list after its first n entries and their order does not matter:
//       top_k > 0: n <= top_k;
//       top_p < 1: n <= the smallest n' >= 1 with p_0 + ... + p_(n'-1) >= top_p;
//       min_p > 0: keep p_i >= min_p * p_max, i.e. e_i >= min_p (p_max has e = 1).
//     At least one token (the first) is always kept. This is SGLang's reference semantics.
//  5. Draw u = sampling_uniform(seed, step) in [0, 1), target = u * (e_0 + ... + e_(n-1)), and pick
//     the first kept i (in sorted order) with e_0 + ... + e_i > target; the last kept one if
//     rounding leaves none. Sums are accumulated in order, in double here; the CUDA sampler's are
//     exact sums of each e truncated to units of 2^-43 (sample_select.h), so an e below 2^-43
//     weighs nothing there.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_common.h"
#include "backend/cpu/cpu_ops.h"

namespace serve8::cpu {

namespace {

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(std::max<int64_t>(best, 0));
}

int32_t sample_row(const float* logits, int64_t vocab, const SamplingRow& r) {
  if (r.temperature == 0.0f) return argmax(logits, vocab);

  std::vector<float> z(static_cast<size_t>(vocab));
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    z[static_cast<size_t>(i)] = logits[i] / r.temperature;
    if (z[static_cast<size_t>(i)] > m) m = z[static_cast<size_t>(i)];  // false for NaN
  }
  if (!(m > -std::numeric_limits<float>::infinity())) return argmax(logits, vocab);

  // (e, id) of every token that can be drawn; the min_p cut is applied here already (it keeps a
  // prefix of the sorted list, so filtering first only saves sorting work).
  std::vector<std::pair<float, int32_t>> cand;
  cand.reserve(static_cast<size_t>(vocab));
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float zi = z[static_cast<size_t>(i)];
    const float e = zi == m ? 1.0f : (std::isnan(zi) ? 0.0f : expf(zi - m));
    total += e;
    if (e > 0.0f && (r.min_p <= 0.0f || e >= r.min_p)) cand.emplace_back(e, static_cast<int32_t>(i));
  }
  if (cand.empty()) {  // min_p > 1 drops even the top token: keep the first in sorted order
    for (int64_t i = 0; i < vocab; ++i) {
      if (z[static_cast<size_t>(i)] == m) return static_cast<int32_t>(i);
    }
    return argmax(logits, vocab);  // unreachable: m is some z_i
  }

  const auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = cand.size();
  if (r.top_k > 0 && static_cast<size_t>(r.top_k) < n) {
    n = static_cast<size_t>(r.top_k);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(n), cand.end(), before);
  } else {
    std::sort(cand.begin(), cand.end(), before);
  }
  if (r.top_p < 1.0f) {
    const double threshold = static_cast<double>(r.top_p) * total;
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += cand[i].first;
      if (cum >= threshold) {
        n = i + 1;
        break;
      }
    }
  }

  double kept = 0.0;
  for (size_t i = 0; i < n; ++i) kept += cand[i].first;
  const double target = static_cast<double>(sampling_uniform(r.seed, r.step)) * kept;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += cand[i].first;
    if (cum > target) return cand[i].second;
  }
  return cand[n - 1].second;
}

}  // namespace

void sample(const Tensor& logits, const std::vector<SamplingRow>& rows, int32_t* out_ids) {
  constexpr std::string_view op = "sample";
  check_tensor(logits, op, "logits");
  check_dtype(logits, DType::kF32, op, "logits");
  SERVE8_CHECK(logits.ndim == 2 && logits.dim(1) > 0, "{}: logits has shape {}, expected [B, V]", op,
               logits.shape_str());
  const int64_t b_count = logits.dim(0), vocab = logits.dim(1);
  SERVE8_CHECK(static_cast<int64_t>(rows.size()) == b_count, "{}: {} sampling rows for {} rows of logits", op,
               rows.size(), b_count);
  SERVE8_CHECK(out_ids != nullptr || b_count == 0, "{}: out_ids is null", op);
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingRow& r = rows[i];
    SERVE8_CHECK(r.temperature >= 0.0f && std::isfinite(r.temperature) && !std::isnan(r.top_p) && !std::isnan(r.min_p),
                 "{}: row {} has temperature {}, top_p {}, min_p {}", op, i, r.temperature, r.top_p, r.min_p);
  }
  const float* base = logits.ptr<const float>();
#pragma omp parallel for schedule(dynamic, 1) if (b_count * vocab >= kParallelMinElements)
  for (int64_t b = 0; b < b_count; ++b) {
    out_ids[b] = sample_row(base + b * vocab, vocab, rows[static_cast<size_t>(b)]);
  }
}

void edit_logits(Tensor logits, std::span<const LogitEdit> edits) {
  constexpr std::string_view op = "edit_logits";
  check_dtype(logits, DType::kF32, op, "logits");
  SERVE8_CHECK(logits.ndim == 2, "{}: logits has shape {}, expected [B, V]", op, logits.shape_str());
  float* base = logits.ptr<float>();
  for (const LogitEdit& e : edits) {
    SERVE8_CHECK(e.row >= 0 && e.row < logits.dim(0) && e.token >= 0 && e.token < logits.dim(1),
                 "{}: ({}, {}) is outside logits {}", op, e.row, e.token, logits.shape_str());
    float& x = base[e.row * logits.dim(1) + e.token];
    x = (x > 0.0f ? x * e.mul_pos : x * e.mul_neg) + e.add;
  }
}

void mask_logits(Tensor logits, std::span<const int32_t> rows, std::span<const int32_t> allowed) {
  constexpr std::string_view op = "mask_logits";
  check_dtype(logits, DType::kF32, op, "logits");
  SERVE8_CHECK(logits.ndim == 2, "{}: logits has shape {}, expected [B, V]", op, logits.shape_str());
  const int64_t vocab = logits.dim(1), words = (vocab + 31) / 32;
  SERVE8_CHECK(static_cast<int64_t>(allowed.size()) == static_cast<int64_t>(rows.size()) * words,
               "{}: {} mask words for {} rows of {} tokens, expected {} a row", op, allowed.size(), rows.size(), vocab,
               words);
  for (size_t i = 0; i < rows.size(); ++i) {
    SERVE8_CHECK(rows[i] >= 0 && rows[i] < logits.dim(0), "{}: row {} is outside logits {}", op, rows[i],
                 logits.shape_str());
    float* x = logits.ptr<float>() + rows[i] * vocab;
    const std::span<const int32_t> mask = allowed.subspan(i * static_cast<size_t>(words), static_cast<size_t>(words));
    for (int64_t t = 0; t < vocab; ++t)
      if (!((static_cast<uint32_t>(mask[static_cast<size_t>(t / 32)]) >> (t % 32)) & 1u))
        x[t] = -std::numeric_limits<float>::infinity();
  }
}

}  // namespace serve8::cpu
