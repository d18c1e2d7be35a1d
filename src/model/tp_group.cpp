#include "model/tp_group.h"

#include <omp.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/log.h"

namespace serve8 {

TpGroup::TpGroup(LlamaModel& rank0, std::vector<TpPeer> peers)
    : rank0_(rank0),
      peers_(std::move(peers)),
      threads_per_rank_(std::max(1, omp_get_max_threads() / static_cast<int>(peers_.size() + 1))) {
  for (const TpPeer& p : peers_)
    SERVE8_CHECK(p.backend && p.model && p.kv && p.model->communicator(),
                 "tensor parallel: a peer rank lacks its backend, model, KV pool or communicator");
  for (size_t i = 0; i < peers_.size(); ++i) threads_.emplace_back([this, i] { worker(i); });
}

TpGroup::TpGroup(LlamaModel& rank0, std::vector<TpPeer> local_peers, int64_t num_slots, std::shared_ptr<void> keepalive)
    : rank0_(rank0),
      by_broadcast_(true),
      keepalive_(std::move(keepalive)),
      peers_(std::move(local_peers)),
      threads_per_rank_(std::max(1, omp_get_max_threads() / static_cast<int>(peers_.size() + 1))) {
  SERVE8_CHECK(rank0.communicator(), "tensor parallel: rank 0 has no communicator");
  for (TpPeer& p : peers_) {
    SERVE8_CHECK(p.backend && p.model && p.kv && p.model->communicator(),
                 "tensor parallel: a peer rank lacks its backend, model, KV pool or communicator");
    threads_.emplace_back([this, &p] {
      omp_set_num_threads(threads_per_rank_);
      try {
        serve_tp_rank(*p.model, [&](int64_t) { return std::move(p.kv); });  // made with rank 0's slots
      } catch (const std::exception& e) {
        // Rank 0's next collective then fails when the group's timeout passes (Gloo cannot be
        // interrupted); the log says which rank broke it.
        spdlog::error("tensor parallel rank {}: {}", p.model->tp_shard().rank, e.what());
      }
    });
  }
  const std::vector<int32_t> hello = {static_cast<int32_t>(num_slots), rank0.config().num_layers,
                                      static_cast<int32_t>(rank0.config().hidden_size),
                                      static_cast<int32_t>(rank0.config().vocab_size)};
  broadcast(TpJob::kHello, nullptr, hello);
}

TpGroup::~TpGroup() {
  if (by_broadcast_) {
    try {
      broadcast(TpJob::kStop, nullptr, {});
    } catch (const std::exception& e) {
      spdlog::warn("tensor parallel: stopping the other ranks: {}", e.what());
    }
  } else {
    start(Job::kStop);
  }
  for (std::thread& t : threads_) t.join();
}

void TpGroup::broadcast(TpJob job, const ForwardBatch* batch, std::span<const int32_t> rows) {
  std::vector<int32_t> msg = encode_tp_job(job, batch, rows);
  rank0_.communicator()->broadcast(msg);
}

void TpGroup::start(Job job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = job;
    pending_ = peers_.size();
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
}

void TpGroup::finish() {
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_ == 0; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void TpGroup::worker(size_t peer) {
  omp_set_num_threads(threads_per_rank_);
  uint64_t seen = 0;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      start_cv_.wait(lk, [&] { return generation_ != seen; });
      seen = generation_;
      job = job_;
    }
    if (job == Job::kStop) return;
    std::exception_ptr err;
    try {
      run_peer(peer);
    } catch (...) {
      err = std::current_exception();
      peers_[peer].model->communicator()->abort();
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (err && !error_) error_ = err;
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

void TpGroup::run_peer(size_t peer) {
  TpPeer& p = peers_[peer];
  if (job_ == Job::kForward) {
    p.model->forward_rank(*batch_, *p.kv);
  } else if (job_ == Job::kGraphs) {
    p.model->enable_decode_graphs_rank(*p.kv, graph_max_bs_);
  } else {
    p.model->logits_of_rows_rank(rows_);
  }
}

template <typename F>
auto TpGroup::run_all(Job job, F&& rank0) {
  start(job);
  decltype(rank0()) result;
  try {
    result = rank0();
  } catch (...) {
    rank0_.communicator()->abort();
    try {
      finish();
    } catch (...) {  // the peers' errors follow from rank 0's, which is the one to report
    }
    throw;
  }
  finish();
  return result;
}

Tensor TpGroup::forward(const ForwardBatch& batch, KvCache& kv0) {
  omp_set_num_threads(threads_per_rank_);  // the calling thread is rank 0
  if (by_broadcast_) {
    broadcast(TpJob::kForward, &batch, {});
    return rank0_.forward_rank(batch, kv0);
  }
  batch_ = &batch;
  return run_all(Job::kForward, [&] { return rank0_.forward_rank(batch, kv0); });
}

int TpGroup::enable_decode_graphs(KvCache& kv0, int max_bs) {
  SERVE8_CHECK(!by_broadcast_, "CUDA graphs: ranks in other processes capture none");
  graph_max_bs_ = max_bs;
  return run_all(Job::kGraphs, [&] { return rank0_.enable_decode_graphs_rank(kv0, max_bs); });
}

Tensor TpGroup::logits_of_rows(std::span<const int32_t> rows) {
  omp_set_num_threads(threads_per_rank_);
  if (by_broadcast_) {
    broadcast(TpJob::kLogitsOfRows, nullptr, rows);
    return rank0_.logits_of_rows_rank(rows);
  }
  rows_ = rows;
  return run_all(Job::kLogitsOfRows, [&] { return rank0_.logits_of_rows_rank(rows); });
}

namespace {

void log_shard(const TpShard& s, int tp_size) {
  spdlog::info("tensor parallel rank {}/{}: q heads [{}, {}), kv heads [{}, {}), mlp columns [{}, {}), vocab [{}, {})",
               s.rank, tp_size, s.q_head_begin, s.q_head_begin + s.num_heads, s.kv_head_begin,
               s.kv_head_begin + s.num_kv_heads, s.inter_begin, s.inter_begin + s.intermediate_size, s.vocab_begin,
               s.vocab_begin + s.vocab_size);
}

// The ForwardBatch arrays a forward job carries, in message order.
template <typename Batch>
auto batch_arrays(Batch& b) {
  return std::array{&b.tokens, &b.positions, &b.qo_indptr, &b.kv_indptr, &b.req_rows, &b.new_slot_indptr, &b.new_slots};
}

// A message: job, then each array as its length and elements.
void put(std::vector<int32_t>& m, std::span<const int32_t> a) {
  m.push_back(static_cast<int32_t>(a.size()));
  m.insert(m.end(), a.begin(), a.end());
}

std::span<const int32_t> take(const std::vector<int32_t>& m, size_t& at) {
  SERVE8_CHECK(at < m.size(), "tensor parallel: a step message ends early ({} ints)", m.size());
  const int64_t n = m[at++];
  SERVE8_CHECK(n >= 0 && at + static_cast<size_t>(n) <= m.size(),
               "tensor parallel: a step message's array of {} runs past its {} ints", n, m.size());
  std::span<const int32_t> a(m.data() + at, static_cast<size_t>(n));
  at += static_cast<size_t>(n);
  return a;
}

}  // namespace

std::vector<int32_t> encode_tp_job(TpJob job, const ForwardBatch* batch, std::span<const int32_t> rows) {
  std::vector<int32_t> m = {static_cast<int32_t>(job)};
  if (job == TpJob::kForward) {
    SERVE8_CHECK(batch, "tensor parallel: a forward job without its batch");
    for (const std::vector<int32_t>* a : batch_arrays(*batch)) put(m, *a);
  } else {
    put(m, rows);
  }
  return m;
}

TpJob decode_tp_job(const std::vector<int32_t>& msg, ForwardBatch& batch, std::vector<int32_t>& rows) {
  SERVE8_CHECK(
      !msg.empty() && msg[0] >= static_cast<int32_t>(TpJob::kHello) && msg[0] <= static_cast<int32_t>(TpJob::kStop),
      "tensor parallel: a step message with job {}", msg.empty() ? -1 : msg[0]);
  const TpJob job = static_cast<TpJob>(msg[0]);
  size_t at = 1;
  if (job == TpJob::kForward) {
    for (std::vector<int32_t>* a : batch_arrays(batch)) {
      const std::span<const int32_t> s = take(msg, at);
      a->assign(s.begin(), s.end());
    }
    batch.validate();
  } else {
    const std::span<const int32_t> s = take(msg, at);
    rows.assign(s.begin(), s.end());
  }
  SERVE8_CHECK(at == msg.size(), "tensor parallel: a step message has {} ints past its arrays", msg.size() - at);
  return job;
}

void serve_tp_rank(LlamaModel& model, const std::function<std::unique_ptr<KvCache>(int64_t num_slots)>& make_pool) {
  Communicator& comm = *model.communicator();
  std::vector<int32_t> msg, rows;
  ForwardBatch batch;
  comm.broadcast(msg);
  SERVE8_CHECK(decode_tp_job(msg, batch, rows) == TpJob::kHello && rows.size() == 4,
               "tensor parallel rank {}: the first message from rank 0 is not its hello", comm.rank());
  const ModelConfig& c = model.config();
  SERVE8_CHECK(rows[1] == c.num_layers && rows[2] == c.hidden_size && rows[3] == c.vocab_size,
               "tensor parallel rank {}: rank 0 serves a model of {} layers, hidden {}, vocabulary {}; this process "
               "loaded {}, {}, {}: start every node with the same --model-path",
               comm.rank(), rows[1], rows[2], rows[3], c.num_layers, c.hidden_size, c.vocab_size);
  std::unique_ptr<KvCache> kv = make_pool(rows[0]);
  for (;;) {
    comm.broadcast(msg);
    const TpJob job = decode_tp_job(msg, batch, rows);
    if (job == TpJob::kStop) return;
    if (job == TpJob::kForward) {
      model.forward_rank(batch, *kv);
    } else if (job == TpJob::kLogitsOfRows) {
      model.logits_of_rows_rank(rows);
    }
  }
}

std::vector<std::unique_ptr<LlamaModel>> load_tp_shards(const LoadOptions& options, int tp_size,
                                                        std::span<const int> ranks, std::span<Backend* const> backends,
                                                        const MakeCommunicators& make_comms, int max_tokens,
                                                        int max_seqs) {
  SERVE8_CHECK(!ranks.empty() && ranks.size() == backends.size(), "tensor parallel: {} ranks and {} backends",
               ranks.size(), backends.size());
  LoadedLlama whole = load_llama_weights_of(options, *backends[0]);
  const ModelConfig& c = whole.config;
  tp_shard(c, 0, tp_size);  // refuses a size beyond the KV heads before anything else is made
  std::vector<std::unique_ptr<Communicator>> comms = make_comms(c);
  SERVE8_CHECK(comms.size() == ranks.size(), "tensor parallel: {} communicators for {} ranks", comms.size(),
               ranks.size());
  std::vector<std::unique_ptr<LlamaModel>> models;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const TpShard s = tp_shard(c, ranks[i], tp_size);
    LlamaWeights w = shard_llama_weights(whole.weights, c, s, *backends[0], *backends[i]);
    log_shard(s, tp_size);
    models.push_back(
        std::make_unique<LlamaModel>(c, std::move(w), *backends[i], max_tokens, max_seqs, std::move(comms[i]), &s));
  }
  return models;
}

std::unique_ptr<LlamaModel> load_tp_llama_model(const LoadOptions& options, Backend& backend0, int tp_size,
                                                int local_ranks,
                                                const std::function<std::unique_ptr<Backend>(int rank)>& make_backend,
                                                const MakeCommunicators& make_comms, int max_tokens, int max_seqs,
                                                std::vector<TpPeer>& peers) {
  std::vector<int> ranks = {0};
  std::vector<Backend*> backends = {&backend0};
  std::vector<std::unique_ptr<Backend>> owned;
  for (int r = 1; r < local_ranks; ++r) {
    ranks.push_back(r);
    owned.push_back(make_backend(r));
    backends.push_back(owned.back().get());
  }
  std::vector<std::unique_ptr<LlamaModel>> models =
      load_tp_shards(options, tp_size, ranks, backends, make_comms, max_tokens, max_seqs);
  for (size_t i = 1; i < models.size(); ++i)
    peers.push_back(TpPeer{std::move(owned[i - 1]), std::move(models[i]), nullptr});
  return std::move(models[0]);
}

}  // namespace serve8
