// LlamaModel's CUDA-graph path for decode steps. A decode step is ~10 launches per layer of a few
// microseconds of work each at small batch sizes; replaying them as one graph takes the launch
// overhead off the critical path. Graphs bake in buffer addresses and grid shapes: the batch
// arrays are fixed (sized at start-up), and one graph is captured per bucketed batch size, a step
// padded up to its bucket. Padded rows decode token 0 at position 0 into slot 0 (reserved by the
// allocator for this) on the table's padding row.
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/log.h"
#include "model/llama.h"
#include "model/tp_group.h"

namespace serve8 {

namespace {

// Appends decode rows over slot 0 until the batch has `n` sequences.
void pad_decode_batch(ForwardBatch& b, int n, int32_t padding_row) {
  constexpr int32_t kZero[1] = {0};
  while (b.num_seqs() < n) b.add_sequence(padding_row, 1, kZero, kZero);
}

}  // namespace

std::vector<int> LlamaModel::graph_batch_sizes(int max_bs) {
  // As SGLang: powers of two to 8, then every multiple of 8 (padding wastes at most 7 rows).
  std::vector<int> sizes;
  for (int bs : {1, 2, 4, 8})
    if (bs <= max_bs) sizes.push_back(bs);
  for (int bs = 16; bs <= max_bs; bs += 8) sizes.push_back(bs);
  if (max_bs > 0 && (sizes.empty() || sizes.back() != max_bs)) sizes.push_back(max_bs);
  return sizes;
}

int LlamaModel::enable_decode_graphs(KvCache& kv, int max_bs) {
  return group_ ? group_->enable_decode_graphs(kv, max_bs) : enable_decode_graphs_rank(kv, max_bs);
}

int LlamaModel::enable_decode_graphs_rank(KvCache& kv, int max_bs) {
  disable_decode_graphs();
  SERVE8_CHECK(max_bs >= 1, "--cuda-graph-max-bs {} must be at least 1", max_bs);
  max_bs = std::min(max_bs, max_seqs_);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> sizes = graph_batch_sizes(max_bs);
  graph_kv_ = &kv;
  std::vector<GemmTiming> fresh;
  // Largest first: workspaces grow to their final size in its warm-up, never inside a capture.
  for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) {
    padded_.clear();
    pad_decode_batch(padded_, *it, kv.config().padding_row());
    DecodeGraph g;
    g.batch_size = *it;
    const DeviceBatch db = backend_.upload_batch(padded_, kv);
    // Warm-up: lazily made plans, workspaces and GEMM heuristics; its GEMMs timed where the
    // backend has no verdict for this GPU (--gemm-tuning).
    backend_.begin_gemm_tuning();
    forward_uploaded(db, kv);
    const std::vector<GemmTiming> timed = backend_.end_gemm_tuning();
    fresh.insert(fresh.end(), timed.begin(), timed.end());
    capture_graph(g, db, kv);
    if (!g.graph) {
      graphs_.clear();
      graph_kv_ = nullptr;
      return 0;
    }
    graphs_.push_back(std::move(g));
  }
  std::reverse(graphs_.begin(), graphs_.end());
  backend_.synchronize();
  log_gemm_timings(fresh);
  gemm_timings_.insert(gemm_timings_.end(), fresh.begin(), fresh.end());
  spdlog::info("CUDA graphs: captured {} decode batch sizes (1..{}) in {:.2f} s", graphs_.size(), max_bs,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return static_cast<int>(graphs_.size());
}

void LlamaModel::log_gemm_timings(const std::vector<GemmTiming>& timings) const {
  if (timings.empty()) return;
  size_t library = 0;
  for (const GemmTiming& t : timings) {
    library += t.library;
    spdlog::debug("GEMM {} [{}, {}] x {} rows: serve8 {:.1f} us, library {:.1f} us a launch -> {}",
                  t.fp8 ? "e4m3" : "bf16", t.n, t.k, t.m, t.ours_us, t.library_us, t.library ? "library" : "serve8");
  }
  spdlog::info("GEMM choice: {} decode shapes timed on {}; serve8's kernel takes {}, the library {}",
               timings.size(), backend_.device_description(), timings.size() - library, library);
}

void LlamaModel::disable_decode_graphs() {
  graphs_.clear();
  graph_kv_ = nullptr;
}

void LlamaModel::capture_graph(DecodeGraph& g, const DeviceBatch& db, KvCache& kv) {
  g.graph = backend_.capture([&] { forward_uploaded(db, kv); });
  g.captured = db;
  g.captured.host = nullptr;  // the host arrays of the capture are not kept
}

Tensor LlamaModel::forward_graph(const ForwardBatch& batch, KvCache& kv) {
  const int b = batch.num_seqs();
  if (kv_observer_ || &kv != graph_kv_ || b == 0 || b > graphs_.back().batch_size ||
      batch.num_tokens() != b)  // q_len >= 1 for every row, so T == B means all rows decode
    return {};
  DecodeGraph& g =
      *std::find_if(graphs_.begin(), graphs_.end(), [b](const DecodeGraph& x) { return x.batch_size >= b; });
  padded_ = batch;
  pad_decode_batch(padded_, g.batch_size, kv.config().padding_row());
  const DeviceBatch db = backend_.upload_batch(padded_, kv);
  // The arrays are sized once, before capture; they move only if the backend was asked for
  // larger limits or a larger KV cache afterwards, which would leave the graphs reading freed memory.
  SERVE8_CHECK(db.tokens.data == g.captured.tokens.data && db.kv_indices.data == g.captured.kv_indices.data,
               "forward: the batch arrays moved since the CUDA graphs were captured (reserve_steps or "
               "create_kv_cache after enable_decode_graphs)");
  g.graph->replay();
  return logits_.view(DType::kF32, {g.batch_size, config_.vocab_size}).rows(0, b);
}

}  // namespace serve8
