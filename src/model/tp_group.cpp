#include "model/tp_group.h"

#include <omp.h>

#include <algorithm>

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

TpGroup::~TpGroup() {
  start(Job::kStop);
  for (std::thread& t : threads_) t.join();
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
  } else {
    p.model->logits_of_rows_rank(rows_);
  }
}

Tensor TpGroup::forward(const ForwardBatch& batch, KvCache& kv0) {
  omp_set_num_threads(threads_per_rank_);  // the calling thread is rank 0
  batch_ = &batch;
  start(Job::kForward);
  Tensor logits;
  try {
    logits = rank0_.forward_rank(batch, kv0);
  } catch (...) {
    rank0_.communicator()->abort();
    try {
      finish();
    } catch (...) {  // the peers' errors follow from rank 0's, which is the one to report
    }
    throw;
  }
  finish();
  return logits;
}

Tensor TpGroup::logits_of_rows(std::span<const int32_t> rows) {
  omp_set_num_threads(threads_per_rank_);
  rows_ = rows;
  start(Job::kLogitsOfRows);
  Tensor logits;
  try {
    logits = rank0_.logits_of_rows_rank(rows);
  } catch (...) {
    rank0_.communicator()->abort();
    try {
      finish();
    } catch (...) {
    }
    throw;
  }
  finish();
  return logits;
}

std::unique_ptr<LlamaModel> load_tp_llama_model(const LoadOptions& options, Backend& backend0, int tp_size,
                                                const std::function<std::unique_ptr<Backend>()>& make_backend,
                                                int max_tokens, int max_seqs, std::vector<TpPeer>& peers) {
  LoadedLlama whole = load_llama_weights_of(options, backend0);
  const ModelConfig& c = whole.config;
  tp_shard(c, 0, tp_size);  // refuses a size beyond the KV heads before anything else is made
  const int64_t reduce_elems = int64_t{max_tokens} * c.hidden_size;
  std::vector<std::unique_ptr<Communicator>> comms = backend0.create_communicators(tp_size, reduce_elems);
  std::unique_ptr<LlamaModel> rank0;
  for (int r = 0; r < tp_size; ++r) {
    const TpShard s = tp_shard(c, r, tp_size);
    std::unique_ptr<Backend> own = r == 0 ? nullptr : make_backend();
    Backend& b = r == 0 ? backend0 : *own;
    LlamaWeights w = shard_llama_weights(whole.weights, c, s, backend0, b);
    spdlog::info(
        "tensor parallel rank {}/{}: q heads [{}, {}), kv heads [{}, {}), mlp columns [{}, {}), vocab [{}, {})", r,
        tp_size, s.q_head_begin, s.q_head_begin + s.num_heads, s.kv_head_begin, s.kv_head_begin + s.num_kv_heads,
        s.inter_begin, s.inter_begin + s.intermediate_size, s.vocab_begin, s.vocab_begin + s.vocab_size);
    auto m = std::make_unique<LlamaModel>(c, std::move(w), b, max_tokens, max_seqs,
                                          std::move(comms[static_cast<size_t>(r)]), &s);
    if (r == 0) {
      rank0 = std::move(m);
    } else {
      peers.push_back(TpPeer{std::move(own), std::move(m), nullptr});
    }
  }
  return rank0;
}

}  // namespace serve8
