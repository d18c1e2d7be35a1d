#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/op_profiler.h"

namespace serve8 {

namespace {
constexpr size_t kMaxPending = 4096;  // records before a fold waits for the stream
// An idle stream is held this long before the next op, so the host queues the ops ahead of the
// device and no op's time can include the host's launch, however slowly it launches.
constexpr uint64_t kHoldNs = 20'000'000;

__global__ void hold_kernel(uint64_t ns) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
}  // namespace

OpProfiler::~OpProfiler() {
  for (Record& r : records_) {
    cudaEventDestroy(r.start);
    cudaEventDestroy(r.stop);
  }
}

void OpProfiler::set(bool on) {
  if (on_) fold();
  on_ = on;
  totals_.clear();
}

int OpProfiler::begin(const char* op) {
  if (used_ == kMaxPending) fold();
  if (used_ == records_.size()) {
    Record r{op, nullptr, nullptr};
    SERVE8_CUDA_CHECK(cudaEventCreate(&r.start));
    SERVE8_CUDA_CHECK(cudaEventCreate(&r.stop));
    records_.push_back(r);
  }
  const cudaError_t idle = cudaStreamQuery(stream_);
  if (idle == cudaSuccess) {
    hold_kernel<<<1, 1, 0, stream_>>>(kHoldNs);
    SERVE8_CUDA_CHECK(cudaGetLastError());
  } else if (idle != cudaErrorNotReady) {
    SERVE8_CUDA_CHECK(idle);
  }
  Record& r = records_[used_];
  r.op = op;
  SERVE8_CUDA_CHECK(cudaEventRecord(r.start, stream_));
  return static_cast<int>(used_++);
}

void OpProfiler::end(int record) {
  SERVE8_CUDA_CHECK(cudaEventRecord(records_[static_cast<size_t>(record)].stop, stream_));
}

void OpProfiler::fold() {
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < used_; ++i) {
    float ms = 0.0f;
    SERVE8_CUDA_CHECK(cudaEventElapsedTime(&ms, records_[i].start, records_[i].stop));
    OpTime& t = totals_[records_[i].op];
    t.op = records_[i].op;
    t.ms += ms;
    t.calls++;
  }
  used_ = 0;
}

std::vector<OpTime> OpProfiler::totals() {
  fold();
  std::vector<OpTime> out;
  for (const auto& [name, t] : totals_) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace serve8
