// The CPU sampler: greedy, determinism per (seed, step), the top_k / top_p / min_p filters, and draw
// frequencies against the distribution the procedure in cpu_sampling.cpp defines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_test_util.h"
#include "core/error.h"

namespace serve8 {
namespace {

using test::Rng;
using test::view_of;

class CpuSamplingTest : public ::testing::Test {
 protected:
  // Samples `rows` over the given logits, one row of logits per sampling row.
  std::vector<int32_t> sample(std::vector<float>& logits, const std::vector<SamplingRow>& rows) {
    const auto b = static_cast<int64_t>(rows.size());
    const int64_t v = static_cast<int64_t>(logits.size()) / b;
    std::vector<int32_t> ids(rows.size(), -1);
    be_->sample(view_of(logits, {b, v}), rows, ids.data());
    return ids;
  }
  // Draws one row's logits at steps [0, n) in one batch of n rows.
  std::vector<int32_t> draws(const std::vector<float>& logits, SamplingRow r, int n) {
    std::vector<float> all;
    std::vector<SamplingRow> rows;
    for (int s = 0; s < n; ++s) {
      all.insert(all.end(), logits.begin(), logits.end());
      r.step = static_cast<uint64_t>(s);
      rows.push_back(r);
    }
    return sample(all, rows);
  }

  std::unique_ptr<Backend> be_ = create_cpu_backend();
  Rng rng_{99};
};

int32_t argmax(const std::vector<float>& x, size_t begin, size_t n) {
  return static_cast<int32_t>(std::max_element(x.begin() + static_cast<std::ptrdiff_t>(begin),
                                               x.begin() + static_cast<std::ptrdiff_t>(begin + n)) -
                              (x.begin() + static_cast<std::ptrdiff_t>(begin)));
}

TEST_F(CpuSamplingTest, GreedyIsArgmaxLowestIdOnTies) {
  const size_t b = 6, v = 1000;
  std::vector<float> logits = rng_.normals(b * v, 3.0f);
  logits[2 * v + 10] = 50.0f;  // a tie in row 2: the lower id wins
  logits[2 * v + 700] = 50.0f;
  logits[3 * v + 5] = NAN;  // NaN is never the argmax
  std::vector<SamplingRow> rows(b);
  const std::vector<int32_t> ids = sample(logits, rows);
  for (size_t r = 0; r < b; ++r) EXPECT_EQ(ids[r], argmax(logits, r * v, v)) << r;
  EXPECT_EQ(ids[2], 10);
}

TEST_F(CpuSamplingTest, DeterministicPerSeedAndStepWhateverTheBatch) {
  const size_t v = 500;
  const std::vector<float> logits = rng_.normals(v, 2.0f);
  SamplingRow r{.temperature = 1.0f, .seed = 1234, .step = 17};
  std::vector<float> one = logits;
  const int32_t alone = sample(one, {r})[0];
  // The same row in the middle of a batch of other requests.
  std::vector<float> batch = rng_.normals(2 * v, 2.0f);
  batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(v), logits.begin(), logits.end());
  SamplingRow other{.temperature = 0.7f, .top_k = 5, .seed = 1, .step = 3};
  EXPECT_EQ(sample(batch, {other, r, other})[1], alone);
  // Different steps draw different tokens (the distribution is wide).
  const std::vector<int32_t> d = draws(logits, r, 64);
  EXPECT_GT(std::set<int32_t>(d.begin(), d.end()).size(), 10u);
}

TEST_F(CpuSamplingTest, TopK1AndTinyTopPAreGreedy) {
  const size_t v = 2000;
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<float> logits = rng_.normals(v, 2.0f);
    const int32_t greedy = argmax(logits, 0, v);
    for (const int32_t id : draws(logits, {.temperature = 1.3f, .top_k = 1, .seed = 5}, 20)) EXPECT_EQ(id, greedy);
    for (const int32_t id : draws(logits, {.temperature = 0.8f, .top_p = 1e-6f, .seed = 6}, 20)) EXPECT_EQ(id, greedy);
    for (const int32_t id : draws(logits, {.temperature = 1.0f, .top_p = 0.0f, .seed = 7}, 5)) EXPECT_EQ(id, greedy);
  }
}

// The kept set and the renormalized distribution the documented procedure defines, in double.
std::map<int32_t, double> expected_distribution(const std::vector<float>& logits, const SamplingRow& r) {
  const double m = *std::max_element(logits.begin(), logits.end()) / r.temperature;
  std::vector<std::pair<double, int32_t>> p;
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp(logits[i] / r.temperature - m);
    p.emplace_back(e, static_cast<int32_t>(i));
    z += e;
  }
  std::sort(p.begin(), p.end(),
            [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  size_t n = p.size();
  if (r.top_k > 0) n = std::min(n, static_cast<size_t>(r.top_k));
  double cum = 0;
  for (size_t i = 0; i < n && r.top_p < 1.0f; ++i) {
    cum += p[i].first / z;
    if (cum >= r.top_p) n = i + 1;
  }
  if (r.min_p > 0) {
    size_t keep = 1;
    while (keep < n && p[keep].first >= r.min_p) ++keep;
    n = keep;
  }
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += p[i].first;
  std::map<int32_t, double> out;
  for (size_t i = 0; i < n; ++i) out[p[i].second] = p[i].first / kept;
  return out;
}

// Frequencies over many steps follow the expected distribution (each within 5 sigma) and never
// leave the kept set.
void check_frequencies(const std::vector<int32_t>& ids, const std::map<int32_t, double>& want) {
  std::map<int32_t, int> count;
  for (int32_t id : ids) ++count[id];
  for (const auto& [id, c] : count) ASSERT_TRUE(want.count(id)) << "token " << id << " drawn but filtered out";
  const double n = static_cast<double>(ids.size());
  double chi2 = 0;
  for (const auto& [id, p] : want) {
    const double got = count.count(id) ? count.at(id) : 0;
    EXPECT_NEAR(got / n, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-9) << "token " << id;
    chi2 += (got - n * p) * (got - n * p) / (n * p);
  }
  // Loose chi-square bound: mean k-1, sd sqrt(2(k-1)).
  const double k = static_cast<double>(want.size());
  EXPECT_LT(chi2, k - 1 + 6 * std::sqrt(2 * (k - 1)) + 1) << "chi2 over " << k << " tokens";
}

TEST_F(CpuSamplingTest, FrequenciesFollowTheDistribution) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -3.0f, 0.9f, 1.2f};
  const int n = 100000;
  check_frequencies(draws(logits, {.temperature = 1.0f, .seed = 42}, n),
                    expected_distribution(logits, {.temperature = 1.0f}));
  check_frequencies(draws(logits, {.temperature = 0.6f, .seed = 43}, n),
                    expected_distribution(logits, {.temperature = 0.6f}));
}

TEST_F(CpuSamplingTest, FiltersKeepTheDocumentedSet) {
  const std::vector<float> logits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -3.0f, 0.9f, 1.2f};
  const int n = 40000;
  for (const SamplingRow r : {SamplingRow{.temperature = 1.0f, .top_k = 3, .seed = 1},
                              SamplingRow{.temperature = 1.0f, .top_p = 0.7f, .seed = 2},
                              SamplingRow{.temperature = 0.8f, .min_p = 0.3f, .seed = 3},
                              SamplingRow{.temperature = 1.5f, .top_p = 0.9f, .top_k = 5, .min_p = 0.1f, .seed = 4}}) {
    const auto want = expected_distribution(logits, r);
    ASSERT_GT(want.size(), 1u);
    ASSERT_LT(want.size(), logits.size());
    check_frequencies(draws(logits, r, n), want);
  }
}

TEST_F(CpuSamplingTest, MinPDropsUnlikelyTokens) {
  // Token 0 is far ahead; min_p = 0.1 keeps only tokens within a factor 10 of it.
  const std::vector<float> logits = {5.0f, 3.0f, 2.0f, 0.0f, 4.9f, -1.0f};
  const float min_p = 0.1f;
  for (const int32_t id : draws(logits, {.temperature = 1.0f, .min_p = min_p, .seed = 8}, 5000)) {
    ASSERT_GE(std::exp(logits[static_cast<size_t>(id)] - 5.0f), min_p) << id;
  }
  // min_p above 1 still keeps the most likely token.
  for (const int32_t id : draws(logits, {.temperature = 1.0f, .min_p = 2.0f, .seed = 9}, 50)) ASSERT_EQ(id, 0);
}

TEST_F(CpuSamplingTest, LargeVocabularyAndExtremeLogits) {
  const size_t v = 128256;
  std::vector<float> logits = rng_.normals(v, 1.0f);
  logits[77] = INFINITY;  // an infinite logit takes all the mass
  logits[78] = NAN;
  for (const int32_t id : draws(logits, {.temperature = 1.0f, .seed = 3}, 8)) EXPECT_EQ(id, 77);
  std::vector<float> dead(v, -INFINITY);
  EXPECT_EQ(sample(dead, {{.temperature = 1.0f}})[0], 0);
}

TEST_F(CpuSamplingTest, RejectsBadArguments) {
  std::vector<float> logits = rng_.normals(20);
  EXPECT_THROW(sample(logits, {{.temperature = -1.0f}, {}}), Error);
  EXPECT_THROW(sample(logits, {{.temperature = 1.0f, .top_p = NAN}, {}}), Error);
  std::vector<int32_t> ids(3);
  EXPECT_THROW(be_->sample(view_of(logits, {2, 10}), std::vector<SamplingRow>(3), ids.data()), Error);
}

}  // namespace
}  // namespace serve8
