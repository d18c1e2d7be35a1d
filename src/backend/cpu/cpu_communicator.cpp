#include "backend/cpu/cpu_communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace serve8 {

namespace {

// A reusable barrier that can be broken: std::barrier cannot release its waiters when a rank
// fails, and a failed rank must not leave the others blocked for ever.
class BreakableBarrier {
 public:
  explicit BreakableBarrier(int n) : n_(n) {}
  void arrive_and_wait(int rank) {
    std::unique_lock<std::mutex> lk(mu_);
    check(rank);
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return generation_ != gen || broken_; });
    check(rank);
  }
  void break_all() {
    std::lock_guard<std::mutex> lk(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  void check(int rank) const {
    SERVE8_CHECK(!broken_, "tensor parallel: rank {} stopped waiting: another rank of the group failed", rank);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int n_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
};

// What each rank publishes for the collective in progress.
struct Slot {
  void* data = nullptr;
  int64_t rows = 0, cols = 0;  // all_reduce: cols = element count, rows = 1
  DType dtype = DType::kF32;
};

struct Group {
  Group(int n, int64_t max_reduce_elems)
      : barrier(n), slots(static_cast<size_t>(n)), sum(static_cast<size_t>(max_reduce_elems)) {}
  BreakableBarrier barrier;
  std::vector<Slot> slots;
  std::vector<float> sum;  // all_reduce_sum's result, each rank writing its share of the elements
};

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<Group> g, int rank, int size) : g_(std::move(g)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void abort() override { g_->barrier.break_all(); }

  void all_reduce_sum(Tensor x) override {
    SERVE8_CHECK(x.dtype == DType::kF32 && (x.ndim == 0 || x.data != nullptr),
                 "all_reduce_sum: rank {} passed {} {}; the CPU communicator sums fp32", rank_, dtype_name(x.dtype),
                 x.shape_str());
    const int64_t n = x.numel();
    SERVE8_CHECK(n <= static_cast<int64_t>(g_->sum.size()), "all_reduce_sum: {} elements exceed the group's {}", n,
                 g_->sum.size());
    g_->slots[static_cast<size_t>(rank_)] = Slot{x.data, 1, n, DType::kF32};
    g_->barrier.arrive_and_wait(rank_);
    // Every rank sees the same mismatch, so every rank throws and none waits.
    for (const Slot& s : g_->slots)
      SERVE8_CHECK(s.cols == n, "all_reduce_sum: rank {} has {} elements, another rank {}", rank_, n, s.cols);
    // Rank r adds up elements [r n / N, (r+1) n / N) over the ranks, in rank order.
    const int64_t begin = n * rank_ / size_, end = n * (rank_ + 1) / size_;
    float* sum = g_->sum.data();
    const auto* first = static_cast<const float*>(g_->slots[0].data);
    for (int64_t i = begin; i < end; ++i) sum[i] = first[i];
    for (size_t q = 1; q < g_->slots.size(); ++q) {
      const auto* src = static_cast<const float*>(g_->slots[q].data);
      for (int64_t i = begin; i < end; ++i) sum[i] += src[i];
    }
    g_->barrier.arrive_and_wait(rank_);
    // The next collective's first barrier keeps `sum` intact until every rank has copied it out.
    if (n > 0) std::memcpy(x.data, sum, static_cast<size_t>(n) * sizeof(float));
  }

  void all_gather(const Tensor& in, Tensor out) override {
    SERVE8_CHECK(in.ndim == 2 && out.ndim == 2 && in.dtype == out.dtype && in.dim(0) == out.dim(0),
                 "all_gather: rank {}: in {} {} and out {} {}, expected [R, C_r] and [R, sum C_r] of one dtype", rank_,
                 dtype_name(in.dtype), in.shape_str(), dtype_name(out.dtype), out.shape_str());
    g_->slots[static_cast<size_t>(rank_)] = Slot{in.data, in.dim(0), in.dim(1), in.dtype};
    g_->barrier.arrive_and_wait(rank_);
    int64_t total = 0;
    for (const Slot& s : g_->slots) {
      SERVE8_CHECK(s.rows == in.dim(0) && s.dtype == in.dtype,
                   "all_gather: rank {} has {} rows of {}, another rank {} of {}", rank_, in.dim(0),
                   dtype_name(in.dtype), s.rows, dtype_name(s.dtype));
      total += s.cols;
    }
    SERVE8_CHECK(total == out.dim(1), "all_gather: the ranks' {} columns do not fill rank {}'s out {}", total, rank_,
                 out.shape_str());
    const size_t esize = dtype_size(in.dtype);
    auto* dst = static_cast<uint8_t*>(out.data);
    int64_t col = 0;
    for (const Slot& s : g_->slots) {
      const auto* src = static_cast<const uint8_t*>(s.data);
      const size_t row_bytes = static_cast<size_t>(s.cols) * esize;
      for (int64_t r = 0; r < s.rows && row_bytes > 0; ++r)
        std::memcpy(dst + (static_cast<size_t>(r * total + col)) * esize, src + static_cast<size_t>(r) * row_bytes,
                    row_bytes);
      col += s.cols;
    }
    // No rank may overwrite its input (or republish its slot) before every rank has read it.
    g_->barrier.arrive_and_wait(rank_);
  }

 private:
  std::shared_ptr<Group> g_;
  int rank_;
  int size_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int n, int64_t max_reduce_elems) {
  SERVE8_CHECK(n >= 1 && max_reduce_elems >= 0, "in-process communicators: {} ranks, {} elements", n, max_reduce_elems);
  auto g = std::make_shared<Group>(n, max_reduce_elems);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<InProcessCommunicator>(g, r, n));
  return out;
}

}  // namespace serve8
