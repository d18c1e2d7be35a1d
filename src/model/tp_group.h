// TpGroup: the ranks of a tensor-parallel model, one thread per rank.
//
// Why threads: the CPU backend's memory is the process's, so collectives between threads are
// plain copies (no shared-memory segments, no batch serialization between processes), and a step
// needs no IPC. The scheduler thread itself is rank 0 (as SGLang's rank-0 process hosts its
// scheduler): it decides each step for every rank, runs rank 0's shard and samples once from the
// gathered logits, while ranks 1..N-1 run the same batch on their own threads and backends.
//
// Across processes (--nnodes), rank 0 broadcasts each step (encode_tp_job) over the group's
// communicators, and every other rank, in this process or another, runs serve_tp_rank.
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

// The steps rank 0 sends ranks that get them by broadcast.
enum class TpJob : int32_t { kHello = 1, kForward = 2, kLogitsOfRows = 3, kStop = 4 };
std::vector<int32_t> encode_tp_job(TpJob job, const ForwardBatch* batch, std::span<const int32_t> rows);
// Fills batch (kForward) or rows (kLogitsOfRows, kHello: the pool's slots and the model's shape);
// throws serve8::Error on a malformed message.
TpJob decode_tp_job(const std::vector<int32_t>& msg, ForwardBatch& batch, std::vector<int32_t>& rows);

// A rank that gets its steps by broadcast: takes rank 0's pool size (kHello), makes its pool with
// make_pool, then runs rank 0's steps until kStop.
void serve_tp_rank(LlamaModel& model, const std::function<std::unique_ptr<KvCache>(int64_t num_slots)>& make_pool);

class TpGroup {
 public:
  TpGroup(LlamaModel& rank0, std::vector<TpPeer> peers);
  // Steps go to the other ranks by broadcast: the local peers (with their pools) run
  // serve_tp_rank on threads, ranks in other processes their own; keepalive (the rendezvous)
  // lives as long.
  TpGroup(LlamaModel& rank0, std::vector<TpPeer> local_peers, int64_t num_slots, std::shared_ptr<void> keepalive);
  ~TpGroup();
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  // LlamaModel::forward / logits_of_rows over all ranks; kv0 is rank 0's pool. A rank's failure
  // breaks the group (its collectives throw on every rank) and is rethrown here.
  Tensor forward(const ForwardBatch& batch, KvCache& kv0);
  Tensor logits_of_rows(std::span<const int32_t> rows);
  // Every rank captures its decode graphs (LlamaModel::enable_decode_graphs) at once: the
  // warm-up steps run collectives, and each rank's graphs hold its own. Returns rank 0's count.
  int enable_decode_graphs(KvCache& kv0, int max_bs);

 private:
  enum class Job { kNone, kForward, kLogitsOfRows, kGraphs, kStop };
  void start(Job job);
  void finish();  // waits for the peers; rethrows the first failure
  // Starts `job` on the peers, runs rank0() here, waits; a failure on rank 0 aborts its
  // communicator so that the peers' collectives return, and is the error reported.
  template <typename F>
  auto run_all(Job job, F&& rank0);
  void worker(size_t peer);
  void run_peer(size_t peer);
  void broadcast(TpJob job, const ForwardBatch* batch, std::span<const int32_t> rows);

  LlamaModel& rank0_;
  bool by_broadcast_ = false;
  std::shared_ptr<void> keepalive_;
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
  int graph_max_bs_ = 0;
  std::vector<std::thread> threads_;
};

// The communicators of a process's ranks (one per rank, in their order), made once the model's
// shape is known.
using MakeCommunicators = std::function<std::vector<std::unique_ptr<Communicator>>(const ModelConfig&)>;

// This process's ranks of a tp_size group: the model loaded once on backends[0], each rank's
// shard on backends[i] with its communicator.
std::vector<std::unique_ptr<LlamaModel>> load_tp_shards(const LoadOptions& options, int tp_size,
                                                        std::span<const int> ranks, std::span<Backend* const> backends,
                                                        const MakeCommunicators& make_comms, int max_tokens,
                                                        int max_seqs);
// Ranks 0..local_ranks-1 of a tp_size group in this process: rank 0's model (returned) on
// backend0, each other rank's on make_backend(rank), in `peers` (their KV pools are the
// caller's to add before attach_tp_peers or attach_tp_group).
std::unique_ptr<LlamaModel> load_tp_llama_model(const LoadOptions& options, Backend& backend0, int tp_size,
                                                int local_ranks,
                                                const std::function<std::unique_ptr<Backend>(int rank)>& make_backend,
                                                const MakeCommunicators& make_comms, int max_tokens, int max_seqs,
                                                std::vector<TpPeer>& peers);

}  // namespace serve8
