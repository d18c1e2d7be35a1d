// Start-up timing of the decode GEMMs (--gemm-tuning): where the measured table has no verdict for
// this GPU (the H200's bf16 shapes, a new model's), the warm-up step's own GEMM calls are timed with
// serve8's skinny kernel and with cuBLASLt, back to back over the layers' weights in a CUDA graph as
// a decode step runs them (as bench_gemm times the table's), and the verdict is kept for the
// captured graphs and later steps.
#include <algorithm>
#include <map>
#include <span>
#include <tuple>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace serve8 {

void CudaBackend::set_gemm_tuning(GemmTuning mode) {
  gemm_tuning_ = mode;
  // kAll sets the table aside: every verdict is this start's own timing.
  fp8_choices_ = mode == GemmTuning::kAll ? std::vector<Fp8GemmChoice>{}
                                           : fp8_gemm_choices_for(fp8_gemm_choices(), props_.name);
  table_choices_ = fp8_choices_.size();
}

void CudaBackend::begin_gemm_tuning() {
  noted_gemms_.clear();
  noting_gemms_ = gemm_tuning_ != GemmTuning::kOff && !profiler_.on();
}

double CudaBackend::time_gemms_us(const std::vector<const NotedGemm*>& calls, bool library) {
  const auto body = [&] {
    for (const NotedGemm* c : calls)
      if (library) {
        gemm_->run(c->library);
      } else {
        SERVE8_CHECK(skinny_->run(c->ours, stream_), "gemm tuning: the skinny kernel refused {} x {} x {}", c->ours.m,
                     c->ours.n, c->ours.k);
      }
  };
  body();  // plans and heuristics outside the capture
  std::unique_ptr<StepGraph> graph = capture(body);
  cudaEvent_t start = nullptr, stop = nullptr;
  SERVE8_CUDA_CHECK(cudaEventCreate(&start));
  SERVE8_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kReplays = 5;
  std::vector<double> us;
  graph->replay();  // warm: the first replay uploads the graph
  for (int r = 0; r < kReplays; ++r) {
    SERVE8_CUDA_CHECK(cudaEventRecord(start, stream_));
    graph->replay();
    SERVE8_CUDA_CHECK(cudaEventRecord(stop, stream_));
    SERVE8_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    SERVE8_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(1000.0 * ms / static_cast<double>(calls.size()));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(us.begin(), us.begin() + kReplays / 2, us.end());
  return us[kReplays / 2];
}

std::vector<GemmTiming> CudaBackend::end_gemm_tuning() {
  on_device();
  noting_gemms_ = false;
  const std::vector<NotedGemm> noted = std::move(noted_gemms_);
  noted_gemms_.clear();
  // One group per shape, in the order first called; its calls are the layers' (distinct weights).
  using Key = std::tuple<bool, int64_t, int64_t, int64_t>;
  std::map<Key, std::vector<const NotedGemm*>> groups;
  std::vector<Key> order;
  for (const NotedGemm& c : noted) {
    const Key key{c.fp8, c.ours.n, c.ours.k, c.ours.m};
    if (skinny_->plan(c.ours.m, c.ours.n, c.ours.k, c.ours.x_bf16, c.ours.w_bf16).token_tile == 0) continue;
    auto [it, fresh] = groups.try_emplace(key);
    if (fresh) order.push_back(key);
    auto& calls = it->second;
    if (std::none_of(calls.begin(), calls.end(), [&](const NotedGemm* o) { return o->ours.w == c.ours.w; }))
      calls.push_back(&c);
  }
  std::vector<GemmTiming> timings;
  // The table's entries, then those timed by earlier calls; this call's verdicts join them at the end.
  const std::span<const Fp8GemmChoice> table(fp8_choices_.data(), table_choices_);
  const std::span<const Fp8GemmChoice> timed_before(fp8_choices_.data() + table_choices_,
                                                    fp8_choices_.size() - table_choices_);
  std::vector<Fp8GemmChoice> verdicts;
  for (const Key& key : order) {
    const auto [fp8, n, k, m] = key;
    if (gemm_choices_cover(table, !fp8, n, k)) continue;
    if (std::any_of(timed_before.begin(), timed_before.end(), [&](const Fp8GemmChoice& c) {
          return c.bf16 == !fp8 && c.n == n && c.k == k && c.rows == m;
        }))
      continue;
    const std::vector<const NotedGemm*>& calls = groups.at(key);
    GemmTiming t;
    t.n = n;
    t.k = k;
    t.m = m;
    t.fp8 = fp8;
    t.layers = static_cast<int>(calls.size());
    t.ours_us = time_gemms_us(calls, false);
    t.library_us = time_gemms_us(calls, true);
    t.library = gemm_timing_takes_library(t.ours_us, t.library_us);
    verdicts.push_back({props_.name, n, k, m, t.library, !fp8});
    timings.push_back(t);
  }
  fp8_choices_.insert(fp8_choices_.end(), verdicts.begin(), verdicts.end());
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return timings;
}

}  // namespace serve8
