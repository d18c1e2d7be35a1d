#include <cmath>

#include "backend/backend.h"
#include "core/error.h"

namespace serve8 {

void ForwardBatch::validate() const {
  const size_t t = tokens.size();
  SERVE8_CHECK(positions.size() == t && out_slots.size() == t,
               "forward batch: {} tokens but {} positions and {} out_slots", t, positions.size(), out_slots.size());
  SERVE8_CHECK(!qo_indptr.empty() && qo_indptr.size() == kv_indptr.size(),
               "forward batch: qo_indptr has {} entries, kv_indptr {}", qo_indptr.size(), kv_indptr.size());
  SERVE8_CHECK(qo_indptr.front() == 0 && kv_indptr.front() == 0, "forward batch: indptrs must start at 0");
  SERVE8_CHECK(static_cast<size_t>(qo_indptr.back()) == t, "forward batch: qo_indptr ends at {}, expected {}",
               qo_indptr.back(), t);
  SERVE8_CHECK(static_cast<size_t>(kv_indptr.back()) == kv_indices.size(),
               "forward batch: kv_indptr ends at {}, but there are {} kv_indices", kv_indptr.back(), kv_indices.size());
  for (int b = 0; b < num_seqs(); ++b) {
    const int q = qo_indptr[b + 1] - qo_indptr[b];
    const int kv = kv_indptr[b + 1] - kv_indptr[b];
    SERVE8_CHECK(q >= 1 && kv >= q, "forward batch: sequence {} has {} new tokens and {} kv tokens", b, q, kv);
  }
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
}

}  // namespace serve8
