// The in-process communicator: N rank threads, sums and gathers of odd sizes, repeated calls
// (the barriers must keep one collective's buffers apart from the next), uneven gathers, and a
// failing rank releasing the others.
#include "backend/cpu/cpu_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "core/error.h"

namespace serve8 {
namespace {

// Runs body(rank, comm) on one thread per rank and joins them.
void run_ranks(std::vector<std::unique_ptr<Communicator>>& comms, const std::function<void(int, Communicator&)>& body) {
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    Communicator* c = comms[r].get();
    threads.emplace_back([&body, c] { body(c->rank(), *c); });
  }
  for (std::thread& t : threads) t.join();
}

float value(int rank, int64_t i, int round) {
  return 0.1f * static_cast<float>(rank + 1) + 0.37f * static_cast<float>(i % 97) - static_cast<float>(round);
}

TEST(CpuCommunicator, AllReduceSumsInRankOrderOnEveryRank) {
  for (int n : {1, 2, 3, 4}) {
    for (int64_t count : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1001}}) {
      auto comms = make_in_process_communicators(n, 1001);
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      run_ranks(comms, [&](int rank, Communicator& c) {
        EXPECT_EQ(c.size(), n);
        std::vector<float>& x = got[static_cast<size_t>(rank)];
        for (int round = 0; round < 5; ++round) {  // back to back: the staging area is reused
          x.assign(static_cast<size_t>(count), 0.0f);
          for (int64_t i = 0; i < count; ++i) x[static_cast<size_t>(i)] = value(rank, i, round);
          c.all_reduce_sum(Tensor(x.data(), DType::kF32, {count}));
        }
      });
      for (int64_t i = 0; i < count; ++i) {
        float want = value(0, i, 4);
        for (int q = 1; q < n; ++q) want += value(q, i, 4);
        for (int r = 0; r < n; ++r)  // bit for bit, the same sum on every rank
          ASSERT_EQ(std::memcmp(&got[static_cast<size_t>(r)][static_cast<size_t>(i)], &want, 4), 0)
              << "n " << n << " count " << count << " rank " << r << " element " << i;
      }
    }
  }
}

TEST(CpuCommunicator, AllGatherUnevenColumns) {
  for (int n : {1, 2, 3, 4}) {
    const int64_t rows = 3;
    // 7 columns over n ranks: uneven shares (2/2/3 at n = 3), as a vocabulary split can be.
    std::vector<int64_t> cols, offset;
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      cols.push_back((7 * (r + 1)) / n - (7 * r) / n);
      offset.push_back(total);
      total += cols.back();
    }
    auto comms = make_in_process_communicators(n, 0);
    std::vector<std::vector<int32_t>> outs(static_cast<size_t>(n));
    run_ranks(comms, [&](int rank, Communicator& c) {
      const auto ri = static_cast<size_t>(rank);
      std::vector<int32_t> in(static_cast<size_t>(rows * cols[ri]));
      for (int round = 0; round < 3; ++round) {
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols[ri]; ++j)
            in[static_cast<size_t>(i * cols[ri] + j)] = static_cast<int32_t>(1000 * round + 100 * i + offset[ri] + j);
        outs[ri].assign(static_cast<size_t>(rows * total), -1);
        c.all_gather(Tensor(in.data(), DType::kI32, {rows, cols[ri]}),
                     Tensor(outs[ri].data(), DType::kI32, {rows, total}));
      }
    });
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < total; ++j)
          ASSERT_EQ(outs[static_cast<size_t>(r)][static_cast<size_t>(i * total + j)], 2000 + 100 * i + j)
              << "n " << n << " rank " << r << " row " << i << " column " << j;
  }
}

TEST(CpuCommunicator, MismatchedSizesThrowOnEveryRank) {
  auto comms = make_in_process_communicators(2, 16);
  std::atomic<int> thrown{0};
  run_ranks(comms, [&](int rank, Communicator& c) {
    std::vector<float> x(static_cast<size_t>(4 + rank));
    try {
      c.all_reduce_sum(Tensor(x.data(), DType::kF32, {4 + rank}));
    } catch (const Error&) {
      ++thrown;
    }
  });
  EXPECT_EQ(thrown.load(), 2);
  std::vector<float> big(17);
  EXPECT_THROW(comms[0]->all_reduce_sum(Tensor(big.data(), DType::kF32, {17})), Error);
}

TEST(CpuCommunicator, AbortReleasesWaitingRanks) {
  auto comms = make_in_process_communicators(3, 8);
  std::atomic<int> released{0};
  run_ranks(comms, [&](int rank, Communicator& c) {
    if (rank == 2) {  // fails before its collective
      c.abort();
      return;
    }
    std::vector<float> x(8, 1.0f);
    try {
      c.all_reduce_sum(Tensor(x.data(), DType::kF32, {8}));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("another rank"), std::string::npos) << e.what();
      ++released;
    }
  });
  EXPECT_EQ(released.load(), 2);
}

}  // namespace
}  // namespace serve8
