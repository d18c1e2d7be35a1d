// TpGroup: the ranks of a tensor-parallel model in one process, one thread per rank.
//
// Why threads: the CPU backend's memory is the process's, so collectives between threads are
// plain copies (no shared-memory segments, no batch serialization between processes), and a step
// needs no IPC. The scheduler thread itself is rank 0 (as SGLang's rank-0 process hosts its
// scheduler): it decides each step for every rank, runs rank 0's shard and samples once from the
// gathered logits, while ranks 1..N-1 run the same batch on their own threads and backends.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "model/llama.h"

namespace serve8 {

// A rank other than 0: its backend, its shard of the model and its KV heads' pool.
struct TpPeer {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> kv;
};

class TpGroup {
 public:
  TpGroup(LlamaModel& rank0, std::vector<TpPeer> peers);
  ~TpGroup();
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  // LlamaModel::forward / logits_of_rows over all ranks; kv0 is rank 0's pool. A rank's failure
  // breaks the group (its collectives throw on every rank) and is rethrown here.
  Tensor forward(const ForwardBatch& batch, KvCache& kv0);
  Tensor logits_of_rows(std::span<const int32_t> rows);

 private:
  enum class Job { kNone, kForward, kLogitsOfRows, kStop };
  void start(Job job);
  void finish();  // waits for the peers; rethrows the first failure
  void worker(size_t peer);
  void run_peer(size_t peer);

  LlamaModel& rank0_;
  std::vector<TpPeer> peers_;
  int threads_per_rank_;  // OpenMP threads of each rank's ops: the cores shared out
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  Job job_ = Job::kNone;
  uint64_t generation_ = 0;
  size_t pending_ = 0;
  std::exception_ptr error_;
  // The call's arguments, read by the peers while it runs.
  const ForwardBatch* batch_ = nullptr;
  std::span<const int32_t> rows_;
  std::vector<std::thread> threads_;
};

// Loads the model once on `backend0` and splits it over tp_size ranks (tp_shard): rank 0's model
// stays on backend0 (returned); each peer gets a backend from make_backend, its shard and its
// communicator in `peers` (their KV pools are the caller's to add before attach_tp_peers).
std::unique_ptr<LlamaModel> load_tp_llama_model(const LoadOptions& options, Backend& backend0, int tp_size,
                                                const std::function<std::unique_ptr<Backend>()>& make_backend,
                                                int max_tokens, int max_seqs, std::vector<TpPeer>& peers);

}  // namespace serve8
