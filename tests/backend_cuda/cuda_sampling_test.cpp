// The CUDA sampler against the CPU sampler (the contract in backend/cpu/cpu_sampling.cpp): the
// same token for the same (logits, seed, step) under every filter, greedy ties and NaN included,
// on a Qwen-sized vocabulary and in batches large enough to be sampled in several chunks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace serve8 {
namespace {

using test::CudaBackendTest;
using test::HostArray;
using test::to_device;

std::vector<int32_t> run(Backend& be, const std::vector<float>& logits, const std::vector<SamplingRow>& rows,
                         bool device) {
  const auto b = static_cast<int64_t>(rows.size());
  const int64_t v = static_cast<int64_t>(logits.size()) / b;
  std::vector<int32_t> ids(rows.size(), -1);
  if (device) {
    Buffer d(be, logits.size() * 4);
    be.copy_to_device(d.data(), logits.data(), logits.size() * 4);
    be.sample(d.view(DType::kF32, {b, v}), rows, ids.data());
  } else {
    std::vector<float> copy = logits;
    be.sample(test::view_of(copy, {b, v}), rows, ids.data());
  }
  return ids;
}

TEST_F(CudaBackendTest, SamplingMatchesCpu) {
  const int64_t v = 152064;
  std::vector<SamplingRow> rows;
  const SamplingRow greedy{};
  const auto row = test::sampling_row;
  rows.push_back(greedy);
  rows.push_back(row(1.0f, 1.0f, -1, 0.0f, 1, 0));
  rows.push_back(row(0.7f, 0.9f, -1, 0.0f, 2, 5));
  rows.push_back(row(0.7f, 1.0f, 50, 0.0f, 3, 9));
  rows.push_back(row(1.3f, 1.0f, -1, 0.05f, 4, 1));
  rows.push_back(row(0.8f, 0.95f, 40, 0.02f, 5, 2));
  rows.push_back(row(1.0f, 1.0f, 1, 0.0f, 6, 3));   // top_k 1 is greedy
  rows.push_back(row(1.0f, 1.0f, -1, 2.0f, 7, 4));  // min_p > 1 keeps only the top token
  rows.push_back(row(0.5f, 0.0f, -1, 0.0f, 8, 4));  // top_p 0 keeps the first
  rows.push_back(greedy);                           // ties and NaN
  rows.push_back(row(1.0f, 1.0f, -1, 0.0f, 9, 0));  // all -inf but one
  for (uint64_t i = 0; i < 53; ++i)
    rows.push_back(row(0.6f + 0.01f * static_cast<float>(i), 0.9f, 100, 0.0f, 100 + i, i));
  const auto b = rows.size();
  std::vector<float> logits = rng_.normals(b * static_cast<size_t>(v), 2.5f);
  // A peaked row, so the filters cut somewhere interesting.
  for (int64_t i = 0; i < 20; ++i) logits[static_cast<size_t>(2 * v + i * 997)] += 9.0f;
  logits[static_cast<size_t>(9 * v + 10)] = 40.0f;
  logits[static_cast<size_t>(9 * v + 500)] = 40.0f;
  logits[static_cast<size_t>(9 * v + 3)] = NAN;
  for (int64_t i = 0; i < v; ++i) logits[static_cast<size_t>(10 * v + i)] = -INFINITY;
  logits[static_cast<size_t>(10 * v + 77)] = 0.0f;
  const std::vector<int32_t> want = run(*cpu_, logits, rows, false);
  const std::vector<int32_t> got = run(*gpu_, logits, rows, true);
  EXPECT_EQ(want[9], 10);
  EXPECT_EQ(want[10], 77);
  int mismatches = 0;
  for (size_t i = 0; i < b; ++i) {
    if (got[i] != want[i]) {
      ++mismatches;
      ADD_FAILURE() << "row " << i << ": cuda " << got[i] << " cpu " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Rows are scanned in slices of about 4,096 logits (float4 loads when the row length allows):
// maxima at a row's ends and ties across a slice boundary, on vocabularies either side of that.
TEST_F(CudaBackendTest, SamplingAcrossSlicesMatchesCpu) {
  for (const int64_t v : {int64_t{50257}, int64_t{50260}}) {
    std::vector<SamplingRow> rows(6);
    for (size_t i = 3; i < rows.size(); ++i) {
      rows[i].temperature = 0.8f;
      rows[i].top_p = 0.9f;
      rows[i].seed = 11 + i;
    }
    std::vector<float> logits = rng_.normals(rows.size() * static_cast<size_t>(v), 1.0f);
    const auto at = [&](size_t row, int64_t i) -> float& { return logits[row * static_cast<size_t>(v) + i]; };
    at(0, v - 1) = 30.0f;  // the last logit
    at(1, 0) = 30.0f;      // the first
    for (const int64_t i : {int64_t{3867}, int64_t{3868}, int64_t{3869}, int64_t{40000}}) at(2, i) = 30.0f;
    at(3, v - 2) = 12.0f;
    at(4, 4100) = 12.0f;
    const std::vector<int32_t> want = run(*cpu_, logits, rows, false);
    EXPECT_EQ(want[0], v - 1);
    EXPECT_EQ(want[1], 0);
    EXPECT_EQ(want[2], 3867);
    EXPECT_EQ(run(*gpu_, logits, rows, true), want) << "vocabulary " << v;
  }
}

// Equal logits share e: the cut and the draw land inside runs of ties, which the sampler counts
// in id order across slices (a row of 13 repeating values, and a flat row).
TEST_F(CudaBackendTest, SamplingTiedRowsMatchCpu) {
  const int64_t v = 50000;
  std::vector<SamplingRow> rows;
  std::vector<float> logits;
  const SamplingRow filters[] = {
      test::sampling_row(1.0f, 1.0f, -1, 0.0f, 5, 0), test::sampling_row(0.7f, 0.9f, -1, 0.0f, 5, 0),
      test::sampling_row(0.7f, 1.0f, 5000, 0.0f, 5, 0), test::sampling_row(1.0f, 0.3f, 40, 0.0f, 5, 0),
      test::sampling_row(0.9f, 1.0f, -1, 0.5f, 5, 0)};
  for (int pattern = 0; pattern < 2; ++pattern) {
    for (SamplingRow r : filters) {
      for (uint64_t step = 0; step < 4; ++step) {
        r.step = step;
        rows.push_back(r);
        for (int64_t i = 0; i < v; ++i)
          logits.push_back(pattern == 0 ? static_cast<float>((i * 7919) % 13) * 0.25f : 1.5f);
      }
    }
  }
  const std::vector<int32_t> want = run(*cpu_, logits, rows, false);
  EXPECT_EQ(run(*gpu_, logits, rows, true), want);
}

TEST_F(CudaBackendTest, SamplingIsAPureFunctionOfSeedAndStep) {
  const int64_t v = 32000;
  std::vector<float> logits = rng_.normals(static_cast<size_t>(v), 1.0f);
  SamplingRow r;
  r.temperature = 1.0f;
  r.seed = 42;
  std::vector<SamplingRow> rows(8, r);
  std::vector<float> all;
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].step = i % 2;
    all.insert(all.end(), logits.begin(), logits.end());
  }
  const std::vector<int32_t> got = run(*gpu_, all, rows, true);
  for (size_t i = 2; i < rows.size(); ++i) EXPECT_EQ(got[i], got[i % 2]);
  const std::vector<int32_t> want = run(*cpu_, all, rows, false);
  EXPECT_EQ(got, want);
  std::vector<SamplingRow> bad(1);
  bad[0].temperature = -1.0f;
  Buffer d(*gpu_, static_cast<size_t>(v) * 4);
  int32_t id = 0;
  EXPECT_THROW(gpu_->sample(d.view(DType::kF32, {1, v}), bad, &id), Error);
}

// Penalties and biases (edit_logits) give the CPU's bytes: multiply, then add, both rounded.
TEST_F(CudaBackendTest, LogitEditsMatchCpu) {
  const int64_t b = 3, v = 5000;
  std::vector<float> logits = rng_.normals(static_cast<size_t>(b * v), 4.0f);
  std::vector<LogitEdit> edits;
  for (int32_t r = 0; r < b; ++r)
    for (int32_t t = r; t < v; t += 7)
      edits.push_back({r, t, 1.0f / 1.3f, 1.3f, t % 3 == 0 ? -0.7f * static_cast<float>(t % 5) : 2.5f});
  edits.push_back({1, 4, 1.0f, 1.0f, -INFINITY});
  std::vector<float> ref = logits;
  cpu_->edit_logits(test::view_of(ref, {b, v}), edits);
  Buffer d(*gpu_, logits.size() * 4);
  gpu_->copy_to_device(d.data(), logits.data(), logits.size() * 4);
  gpu_->edit_logits(d.view(DType::kF32, {b, v}), edits);
  std::vector<float> got(logits.size());
  gpu_->copy_to_host(got.data(), d.data(), got.size() * 4);
  EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size() * 4));
  EXPECT_TRUE(std::isinf(got[static_cast<size_t>(v + 4)]));
}

// Grammar masks (mask_logits) clear exactly the CPU's tokens, on the rows named, vocab not a
// multiple of 32; other rows keep their bytes.
TEST_F(CudaBackendTest, GrammarMasksMatchCpu) {
  const int64_t b = 4, v = 50001, words = (v + 31) / 32;
  std::vector<float> logits = rng_.normals(static_cast<size_t>(b * v), 4.0f);
  const std::vector<int32_t> rows = {3, 1};
  std::vector<int32_t> allowed(rows.size() * static_cast<size_t>(words));
  for (size_t i = 0; i < allowed.size(); ++i)
    allowed[i] = static_cast<int32_t>(0x9e3779b9u * static_cast<uint32_t>(i + 1));
  std::vector<float> ref = logits;
  cpu_->mask_logits(test::view_of(ref, {b, v}), rows, allowed);
  Buffer d(*gpu_, logits.size() * 4);
  gpu_->copy_to_device(d.data(), logits.data(), logits.size() * 4);
  gpu_->mask_logits(d.view(DType::kF32, {b, v}), rows, allowed);
  std::vector<float> got(logits.size());
  gpu_->copy_to_host(got.data(), d.data(), got.size() * 4);
  EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), got.size() * 4));
  size_t cleared = 0;
  for (float x : got) cleared += std::isinf(x);
  EXPECT_GT(cleared, static_cast<size_t>(v / 2)) << "about half of two rows' tokens are masked";
  EXPECT_LT(cleared, static_cast<size_t>(2 * v));
  EXPECT_THROW(gpu_->mask_logits(d.view(DType::kF32, {b, v}), rows, std::span(allowed).first(5)), Error);
}

}  // namespace
}  // namespace serve8
