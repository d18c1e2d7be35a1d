#include <algorithm>
#include <cmath>

#include "backend/backend.h"
#include "core/error.h"

namespace serve8 {

GemmTuning parse_gemm_tuning(const std::string& name) {
  if (name == "auto") return GemmTuning::kAuto;
  if (name == "all") return GemmTuning::kAll;
  if (name == "off") return GemmTuning::kOff;
  throw Error(fmt::format("--gemm-tuning {}: expected auto, all or off", name));
}

void ForwardBatch::clear() {
  tokens.clear();
  positions.clear();
  req_rows.clear();
  new_slots.clear();
  qo_indptr.assign(1, 0);
  kv_indptr.assign(1, 0);
  new_slot_indptr.assign(1, 0);
}

void ForwardBatch::add_sequence(int32_t row, int kv_len, std::span<const int32_t> new_tokens,
                                std::span<const int32_t> slots) {
  if (qo_indptr.empty()) clear();
  const int q = static_cast<int>(new_tokens.size());
  for (int i = 0; i < q; ++i) {
    tokens.push_back(new_tokens[static_cast<size_t>(i)]);
    positions.push_back(kv_len - q + i);
  }
  req_rows.push_back(row);
  new_slots.insert(new_slots.end(), slots.begin(), slots.end());
  qo_indptr.push_back(qo_indptr.back() + q);
  kv_indptr.push_back(kv_indptr.back() + kv_len);
  new_slot_indptr.push_back(static_cast<int32_t>(new_slots.size()));
}

void ForwardBatch::validate() const {
  const size_t t = tokens.size();
  SERVE8_CHECK(positions.size() == t, "forward batch: {} tokens but {} positions", t, positions.size());
  SERVE8_CHECK(!qo_indptr.empty() && qo_indptr.size() == kv_indptr.size() &&
                   new_slot_indptr.size() == qo_indptr.size() && req_rows.size() + 1 == qo_indptr.size(),
               "forward batch: qo_indptr has {} entries, kv_indptr {}, new_slot_indptr {}, req_rows {}",
               qo_indptr.size(), kv_indptr.size(), new_slot_indptr.size(), req_rows.size());
  SERVE8_CHECK(qo_indptr.front() == 0 && kv_indptr.front() == 0 && new_slot_indptr.front() == 0,
               "forward batch: indptrs must start at 0");
  SERVE8_CHECK(static_cast<size_t>(qo_indptr.back()) == t, "forward batch: qo_indptr ends at {}, expected {}",
               qo_indptr.back(), t);
  SERVE8_CHECK(static_cast<size_t>(new_slot_indptr.back()) == new_slots.size(),
               "forward batch: new_slot_indptr ends at {}, but there are {} new slots", new_slot_indptr.back(),
               new_slots.size());
  for (int b = 0; b < num_seqs(); ++b) {
    const int q = qo_indptr[b + 1] - qo_indptr[b];
    const int kv = kv_indptr[b + 1] - kv_indptr[b];
    const int n = new_slot_indptr[b + 1] - new_slot_indptr[b];
    SERVE8_CHECK(q >= 1 && n >= q && kv >= n,
                 "forward batch: sequence {} has {} new tokens, {} new slots and {} kv tokens", b, q, n, kv);
  }
}

void check_batch_fits(const ForwardBatch& batch, const KvCacheConfig& c) {
  const int b_count = batch.num_seqs();
  for (int b = 0; b < b_count; ++b) {
    const int32_t row = batch.req_rows[static_cast<size_t>(b)];
    const int kv = batch.kv_indptr[static_cast<size_t>(b) + 1] - batch.kv_indptr[static_cast<size_t>(b)];
    SERVE8_CHECK(row >= 0 && row <= c.padding_row(), "forward batch: table row {} is outside the table's {} rows", row,
                 c.padding_row() + 1);
    SERVE8_CHECK(kv <= c.max_context_len, "forward batch: sequence {} has {} kv tokens, over the table's {} a row", b,
                 kv, c.max_context_len);
  }
  // The kernels index the pool without bounds checks: every slot is checked once, when it enters
  // the table.
  for (int32_t s : batch.new_slots)
    SERVE8_CHECK(s >= 0 && s < c.num_slots, "forward batch: slot {} is outside the pool's {} slots", s, c.num_slots);
}

KvScales KvScales::ones(int num_layers, int num_kv_heads) {
  KvScales s;
  s.k.assign(static_cast<size_t>(num_layers) * num_kv_heads, 1.0f);
  s.v = s.k;
  return s;
}

void check_kv_cache_args(const KvCacheConfig& c, const KvScales& s) {
  SERVE8_CHECK(c.num_layers > 0 && c.num_kv_heads > 0 && c.head_dim > 0 && c.num_slots > 0,
               "kv cache: invalid geometry: {} layers, {} kv heads, head_dim {}, {} slots", c.num_layers,
               c.num_kv_heads, c.head_dim, c.num_slots);
  const size_t n = static_cast<size_t>(c.num_layers) * static_cast<size_t>(c.num_kv_heads);
  SERVE8_CHECK(s.k.size() == n && s.v.size() == n,
               "kv cache: {} k scales and {} v scales for {} layers x {} kv heads (expected {} each)", s.k.size(),
               s.v.size(), c.num_layers, c.num_kv_heads, n);
  for (size_t i = 0; i < n; ++i) {
    // Values are stored divided by the scale: zero, negative or non-finite scales corrupt the pool.
    SERVE8_CHECK(std::isfinite(s.k[i]) && s.k[i] > 0.0f && std::isfinite(s.v[i]) && s.v[i] > 0.0f,
                 "kv cache: scales of layer {} head {} are k={} v={}; they must be finite and positive",
                 i / static_cast<size_t>(c.num_kv_heads), i % static_cast<size_t>(c.num_kv_heads), s.k[i], s.v[i]);
  }
  for (const auto* m : {&s.k_mean, &s.v_mean}) {
    SERVE8_CHECK(m->empty() || m->size() == n * static_cast<size_t>(c.head_dim),
                 "kv cache: {} mean values for {} layers x {} kv heads x head_dim {}", m->size(), c.num_layers,
                 c.num_kv_heads, c.head_dim);
    for (const float x : *m) SERVE8_CHECK(std::isfinite(x), "kv cache: a K or V mean is {}", x);
  }
}

RowLogprobs row_logprobs(const float* logits, int64_t vocab, int32_t chosen, int top_n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = static_cast<double>(mx) + std::log(sum);
  const auto lp = [&](int64_t i) {
    return std::isnan(logits[i]) ? -INFINITY : static_cast<float>(static_cast<double>(logits[i]) - log_z);
  };
  RowLogprobs r;
  r.chosen = chosen >= 0 && chosen < vocab ? lp(chosen) : -INFINITY;
  const int n = static_cast<int>(std::min<int64_t>(std::max(top_n, 0), vocab));
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
  for (int i = 0; i < n; ++i) r.top.emplace_back(ids[static_cast<size_t>(i)], lp(ids[static_cast<size_t>(i)]));
  return r;
}

std::vector<OpTime> charge_kernel_time(std::vector<KernelSpan> spans) {
  std::stable_sort(spans.begin(), spans.end(),
                   [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  std::vector<OpTime> out;
  uint64_t busy_until = 0;  // the latest end so far
  for (const KernelSpan& k : spans) {
    const uint64_t from = std::max(k.start_ns, busy_until);
    const double ms = k.end_ns > from ? static_cast<double>(k.end_ns - from) * 1e-6 : 0.0;
    busy_until = std::max(busy_until, k.end_ns);
    auto it = std::find_if(out.begin(), out.end(), [&](const OpTime& o) { return o.op == k.name; });
    if (it == out.end()) it = out.insert(out.end(), OpTime{k.name, 0.0, 0});
    it->ms += ms;
    it->calls++;
  }
  std::stable_sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

void Backend::set_kernel_tracing(bool on) {
  if (on) fail("bench-one-batch --trace-steps: the {} backend cannot trace its kernels", name());
}

std::vector<std::unique_ptr<Communicator>> Backend::create_communicators(int n, int64_t max_reduce_elems) {
  (void)max_reduce_elems;
  check_communicators(n);
  fail("--tp-size {}: the {} backend has no communicator for tensor parallelism", n, name());
}

void Backend::check_communicators(int n) const {
  fail("--tp-size {}: the {} backend has no communicator for tensor parallelism", n, name());
}

void Backend::embedding_shard(const Tensor& table, const Tensor& ids, int64_t first_id, Tensor out) {
  (void)table, (void)ids, (void)first_id, (void)out;
  fail("embedding_shard: the {} backend has no vocabulary-parallel embedding (tensor parallelism)", name());
}

void Backend::gemm_fp8_weights(const Tensor& x, const Tensor& wq, const Tensor& w_scale, const Tensor* bias,
                               Tensor out) {
  (void)x, (void)wq, (void)w_scale, (void)bias, (void)out;
  fail("gemm_fp8_weights: the {} backend has no GEMM for FP8 weights with unquantized inputs", name());
}

void Communicator::broadcast(std::vector<int32_t>&) {
  throw Error("tensor parallel: this group's ranks share one process; broadcast is for ranks in other processes");
}

}  // namespace serve8
