// The CUDA sampler's sort-free selection (backend/cuda/sample_select.h), run pass by pass as the
// kernels run it (a histogram per level over the candidates in the chosen range, the bins scanned
// from the top), against the CPU sampler: the same token under every filter, on spread, peaked,
// tied and flat rows.
#include "backend/cuda/sample_select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"

namespace serve8 {
namespace {

using test::Rng;
using test::view_of;

// The selection of one sampled row, as the CUDA sampler's passes compute it.
int32_t select_row(const std::vector<float>& logits, const SamplingRow& r) {
  const auto v = static_cast<int64_t>(logits.size());
  float m = -std::numeric_limits<float>::infinity();
  int32_t m_id = -1;
  for (int64_t i = 0; i < v; ++i) {
    const float z = logits[static_cast<size_t>(i)] / r.temperature;
    if (z > m) {
      m = z;
      m_id = static_cast<int32_t>(i);
    }
  }
  std::vector<float> e(static_cast<size_t>(v));
  std::vector<bool> cand(static_cast<size_t>(v));
  uint64_t total = 0, count = 0, cand_mass = 0;
  for (int64_t i = 0; i < v; ++i) {
    const float z = logits[static_cast<size_t>(i)] / r.temperature;
    const float ei = z == m ? 1.0f : (std::isnan(z) ? 0.0f : expf(z - m));
    e[static_cast<size_t>(i)] = ei;
    total += select_mass(ei);
    cand[static_cast<size_t>(i)] = ei > 0.0f && (r.min_p <= 0.0f || ei >= r.min_p);
    if (cand[static_cast<size_t>(i)]) {
      ++count;
      cand_mass += select_mass(ei);
    }
  }
  if (count == 0) return m_id;
  SelectState s{};
  select_begin(s, count, total, cand_mass, r.top_k, r.top_p, sampling_uniform(r.seed, r.step));
  int passes = 0;
  while (s.phase == kSelectCut || s.phase == kSelectDraw) {
    EXPECT_LE(++passes, 2 * kSelectLevels) << "a cut and a draw take a pass a level";
    std::vector<uint64_t> bin_count(kSelectBins), bin_mass(kSelectBins);
    std::vector<uint32_t> bin_min(kSelectBins, std::numeric_limits<uint32_t>::max());
    for (int64_t i = 0; i < v; ++i) {
      if (!cand[static_cast<size_t>(i)]) continue;
      const uint32_t key = select_key(e[static_cast<size_t>(i)]);
      if (!select_in(key, s.level, s.prefix)) continue;
      const uint32_t d = select_digit(key, s.level);
      ++bin_count[d];
      bin_mass[d] += select_mass(e[static_cast<size_t>(i)]);
      bin_min[d] = std::min(bin_min[d], static_cast<uint32_t>(i));
    }
    SelectBin b{};
    uint64_t c = s.count_before, ms = s.mass_before;
    for (int d = kSelectBins - 1; d >= 0 && !b.found; --d) {
      if (bin_count[d] > 0 && select_goal(s, c + bin_count[d], ms + bin_mass[d])) {
        b = SelectBin{true, static_cast<uint32_t>(d), c, ms, bin_count[d], bin_min[d]};
      }
      c += bin_count[d];
      ms += bin_mass[d];
    }
    select_resolve(s, b, cand_mass);
  }
  if (s.phase == kSelectTies) {
    uint64_t seen = 0;
    for (int64_t i = 0; i < v; ++i) {
      if (cand[static_cast<size_t>(i)] && select_key(e[static_cast<size_t>(i)]) == s.prefix && ++seen == s.tie_rank)
        return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token of rank " << s.tie_rank;
    return -1;
  }
  return s.token < 0 ? m_id : s.token;
}

constexpr auto row = test::sampling_row;

class SampleSelectTest : public ::testing::Test {
 protected:
  int32_t cpu(std::vector<float> logits, const SamplingRow& r) {
    int32_t id = -1;
    be_->sample(view_of(logits, {1, static_cast<int64_t>(logits.size())}), {r}, &id);
    return id;
  }
  void expect_same(const std::vector<float>& logits, const SamplingRow& r, const char* what) {
    EXPECT_EQ(select_row(logits, r), cpu(logits, r))
        << what << ": T " << r.temperature << " top_p " << r.top_p << " top_k " << r.top_k << " min_p " << r.min_p
        << " step " << r.step;
  }
  std::unique_ptr<Backend> be_ = create_cpu_backend();
  Rng rng_{7};
};

const SamplingRow kFilters[] = {
    row(1.0f, 1.0f, -1, 0.0f, 1, 0),  row(0.7f, 0.9f, -1, 0.0f, 2, 0),   row(0.7f, 1.0f, 50, 0.0f, 3, 0),
    row(1.3f, 1.0f, -1, 0.05f, 4, 0), row(0.8f, 0.95f, 40, 0.02f, 5, 0), row(1.0f, 1.0f, 1, 0.0f, 6, 0),
    row(1.0f, 1.0f, -1, 2.0f, 7, 0),  row(0.5f, 0.0f, -1, 0.0f, 8, 0),   row(0.6f, 0.5f, 3, 0.0f, 9, 0),
};

TEST_F(SampleSelectTest, SpreadAndPeakedRowsMatchTheCpu) {
  const int64_t v = 20000;
  for (const float spread : {0.5f, 2.5f, 8.0f}) {
    std::vector<float> logits = rng_.normals(static_cast<size_t>(v), spread);
    for (int64_t i = 0; i < 12; ++i) logits[static_cast<size_t>(i * 1597)] += 6.0f;
    for (SamplingRow r : kFilters) {
      for (uint64_t step = 0; step < 8; ++step) {
        r.step = step;
        expect_same(logits, r, "spread");
      }
    }
  }
}

// Equal logits share a key: the cut and the draw must count into a run of ties in id order.
TEST_F(SampleSelectTest, TiedAndFlatRowsMatchTheCpu) {
  const int64_t v = 5000;
  std::vector<float> tied(static_cast<size_t>(v));
  for (int64_t i = 0; i < v; ++i) tied[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 13) * 0.25f;
  const std::vector<float> flat(static_cast<size_t>(v), 1.5f);
  for (SamplingRow r : kFilters) {
    for (uint64_t step = 0; step < 16; ++step) {
      r.step = step;
      expect_same(tied, r, "tied");
      expect_same(flat, r, "flat");
    }
  }
}

// NaN never drawn, -inf never a candidate, +inf the only one.
TEST_F(SampleSelectTest, NonFiniteLogitsMatchTheCpu) {
  std::vector<float> logits = rng_.normals(3000, 1.0f);
  logits[5] = NAN;
  logits[100] = -INFINITY;
  for (const SamplingRow& r : kFilters) expect_same(logits, r, "nan");
  logits[2000] = INFINITY;
  for (const SamplingRow& r : kFilters) EXPECT_EQ(select_row(logits, r), 2000);
}

TEST(SampleSelect, DigitsSplitTheKeyAndOrderLikeTheFloats) {
  const float e = 0.3f;
  const uint32_t key = select_key(e);
  uint32_t rebuilt = 0;
  for (int l = 0; l < kSelectLevels; ++l) {
    EXPECT_TRUE(select_in(key, l, rebuilt));
    rebuilt = (rebuilt << kSelectBits) | select_digit(key, l);
  }
  EXPECT_EQ(rebuilt, key);
  EXPECT_LT(select_key(0.29f), key);
  EXPECT_LT(key, select_key(1.0f));
  EXPECT_LT(select_key(1.99f), 1u << (kSelectBits * kSelectLevels));
  EXPECT_EQ(select_mass(1.0f), uint64_t{1} << 43);
}

}  // namespace
}  // namespace serve8
