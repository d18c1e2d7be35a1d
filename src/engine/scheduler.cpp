#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "engine/logit_edits.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace serve8 {
namespace {

// SGLang's defaults for the decode reservation (SchedulerConfig::schedule_conservativeness), and
// the most of a request's max_new_tokens it counts, so a huge limit does not stall admission.
constexpr double kInitNewTokenRatio = 0.7;
constexpr double kMinNewTokenRatioFactor = 0.14;
constexpr double kNewTokenRatioDecaySteps = 600.0;
constexpr int64_t kMaxNewTokensEstimate = 4096;
// After a retraction the ratio is the running requests' decoded share of their limits, counting
// this many more tokens each.
constexpr int64_t kRetractDecodeSteps = 20;

int64_t max_new_tokens_estimate(const Request& r) {
  return std::min<int64_t>(r.params.max_new_tokens, kMaxNewTokensEstimate);
}

}  // namespace

std::string finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "";
}

Scheduler::Scheduler(const SchedulerConfig& config, LlamaModel& model, KvCache& kv, const Tokenizer* tokenizer)
    : config_(config),
      model_(model),
      kv_(kv),
      tokenizer_(tokenizer),
      slots_(kv.config().num_slots),
      table_(kv.config().max_requests, kv.config().max_context_len),
      radix_(config.disable_radix_cache) {
  SERVE8_CHECK(config.max_running_requests >= 1, "--max-running-requests must be >= 1");
  SERVE8_CHECK(config.chunked_prefill_size >= 1 && config.max_prefill_tokens >= 1,
               "--chunked-prefill-size and --max-prefill-tokens must be >= 1");
  SERVE8_CHECK(model.max_seqs() >= config.max_running_requests &&
                   model.max_tokens() >= config.max_prefill_tokens + config.max_running_requests,
               "model buffers ({} tokens, {} sequences) are smaller than the scheduler's limits", model.max_tokens(),
               model.max_seqs());
  SERVE8_CHECK(
      kv.config().max_requests >= config.max_running_requests && kv.config().max_context_len >= config.context_length,
      "the KV cache's request table ({} rows of {} tokens) is smaller than the scheduler's limits ({} of {})",
      kv.config().max_requests, kv.config().max_context_len, config.max_running_requests, config.context_length);
  SERVE8_CHECK(config.schedule_conservativeness >= 0.0, "--schedule-conservativeness must be >= 0, not {}",
               config.schedule_conservativeness);
  ratio_init_ = std::min(kInitNewTokenRatio * config.schedule_conservativeness, 1.0);
  ratio_min_ = ratio_init_ * kMinNewTokenRatioFactor;
  ratio_decay_ = (ratio_init_ - ratio_min_) / kNewTokenRatioDecaySteps;
  new_token_ratio_ = ratio_init_;
  eos_ids_ = model.config().eos_token_ids;
  if (tokenizer) {
    for (int id : tokenizer->eos_ids())
      if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  }
  counters_.slots_total = slots_.num_slots_total();
}

Scheduler::~Scheduler() = default;

void Scheduler::add_request(std::unique_ptr<Request> r) {
  const int vocab = model_.config().vocab_size;
  std::string error = r->params.validate(vocab);
  const int n = static_cast<int>(r->input_ids.size());
  if (error.empty() && n == 0) error = "the prompt is empty";
  if (error.empty() && n >= config_.context_length)
    error = fmt::format("the prompt has {} tokens, but the context length is {}", n, config_.context_length);
  if (error.empty() && n + 1 > slots_.num_slots_total())
    error = fmt::format("the prompt has {} tokens, but the KV pool holds only {}", n, slots_.num_slots_total());
  for (int32_t id : r->input_ids) {
    if (!error.empty()) break;
    if (id < 0 || id >= vocab) error = fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab);
  }
  if (error.empty() && !r->params.stop.empty() && tokenizer_ == nullptr)
    error = "stop strings need a tokenizer, and this model has none";
  if (!error.empty()) {
    OutputEvent ev;
    ev.finished = true;
    ev.reason = FinishReason::kAbort;
    ev.error = error;
    ev.prompt_tokens = n;
    if (r->sink) r->sink(ev);
    return;
  }
  if (!r->params.stop.empty()) r->stop_detok = std::make_unique<IncrementalDetokenizer>(*tokenizer_);
  r->seed = r->params.seed.value_or(r->seed);
  if (r->params.max_new_tokens == 0) {
    r->finish = FinishReason::kLength;
    emit(*r, {});
    return;
  }
  waiting_.push_back(std::move(r));
}

bool Scheduler::abort(const std::string& rid) {
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->rid != rid) continue;
    std::unique_ptr<Request> r = std::move(*it);
    waiting_.erase(it);
    r->finish = FinishReason::kAbort;
    emit(*r, {});
    return true;
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->rid != rid) continue;
    finish(*running_[i], FinishReason::kAbort);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    return true;
  }
  return false;
}

void Scheduler::abort_all() {
  while (!waiting_.empty()) abort(waiting_.front()->rid);
  while (!running_.empty()) abort(running_.back()->rid);
}

bool Scheduler::flush_cache() {
  if (has_work()) return false;
  slots_.free(radix_.reset());
  return true;
}

int Scheduler::step() {
  const auto t0 = Clock::now();
  std::vector<Row> rows = schedule();
  if (rows.empty()) return 0;
  const Tensor logits = run(rows);
  postprocess(rows, logits);
  int tokens = 0, decode_rows = 0;
  for (const Row& row : rows) {
    tokens += row.q_len;
    decode_rows += row.q_len == 1;
  }
  const bool decodes = decode_rows > 0;
  // The reservation relaxes with every step that decodes, mixed with prompt chunks or not (SGLang
  // decays it once a decode batch, and a stream of arrivals would leave few steps decode-only).
  if (decodes) new_token_ratio_ = std::max(ratio_min_, new_token_ratio_ - ratio_decay_);
  counters_.num_steps++;
  counters_.last_step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const double host = counters_.last_step_seconds - last_device_seconds_;
  const auto kv_tokens = static_cast<int64_t>(batch_.kv_indptr.back());
  if (tokens == decode_rows) {  // q_len >= 1 per row: all rows decode
    counters_.decode.add(counters_.last_step_seconds, host, kv_tokens, 0, decode_rows);
    if (decode_rows >= SchedulerStats::kLargeDecodeBatch)
      counters_.large_decode.add(counters_.last_step_seconds, host, kv_tokens, 0, decode_rows);
  } else {
    counters_.prefill.add(counters_.last_step_seconds, host, kv_tokens, tokens - decode_rows, decode_rows);
  }
  counters_.peak_running = std::max(counters_.peak_running, static_cast<int>(running_.size()));
  return tokens;
}

static_assert(kSlotPageSize == kKvPageSize, "the allocator's pages are the pool's");

bool Scheduler::try_allocate(int64_t n, std::vector<int32_t>& out) {
  if (!slots_.can_allocate(n)) slots_.free(radix_.evict(n - slots_.num_slots_free()));
  if (!slots_.can_allocate(n)) return false;
  const std::vector<int32_t> got = slots_.allocate(n, out.empty() ? -1 : out.back());
  out.insert(out.end(), got.begin(), got.end());
  return true;
}

std::vector<Scheduler::Row> Scheduler::schedule() {
  std::vector<Row> rows;
  int budget = config_.max_prefill_tokens;
  bool retracted = false;
  // Running requests first, oldest first: each decodes one token or continues its prefill.
  for (size_t i = 0; i < running_.size(); ++i) {
    Request* r = running_[i].get();
    const int remaining = r->total_len() - r->num_computed;
    const int q = remaining == 1 ? 1 : std::min({remaining, config_.chunked_prefill_size, budget});
    if (q <= 0) continue;
    bool placed = true;
    while (!try_allocate(q, r->slots)) {
      // Out of slots: give back the newest request's, which has done the least work.
      if (running_.back().get() == r && running_.size() == 1) {
        spdlog::warn("request {}: the KV pool ({} slots) cannot hold it; finishing it", r->rid,
                     slots_.num_slots_total());
        finish(*r, FinishReason::kLength);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        placed = false;
        break;
      }
      const bool self = running_.back().get() == r;
      retract_newest();
      retracted = true;
      if (self) {
        placed = false;
        break;
      }
    }
    if (!placed) break;  // r left running_ (it was the newest): nothing after it remains
    if (remaining > 1) budget -= q;
    rows.push_back(Row{r, q, r->num_computed + q == r->total_len()});
  }
  if (retracted && ratio_init_ > 0.0) {
    // The reservation was too small: raise the ratio to what the survivors have decoded of their
    // limits (SGLang's estimate), so admission waits for room.
    int64_t decoded = 0, limit = 0;
    for (const auto& r : running_) {
      decoded += static_cast<int64_t>(r->output_ids.size()) + kRetractDecodeSteps;
      limit += max_new_tokens_estimate(*r);
    }
    if (limit > 0) new_token_ratio_ = std::min(1.0, std::max(new_token_ratio_, static_cast<double>(decoded) / limit));
  }
  // Then admit waiting requests in arrival order while the budget, the batch and the pool allow.
  int64_t reserved = 0;  // for the running requests' prompt chunks to come and tokens to decode
  if (!retracted && !waiting_.empty())
    for (const auto& r : running_) reserved += pending_tokens(*r);
  while (!retracted && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_running_requests) {
    Request& r = *waiting_.front();
    if (!admit(r, reserved)) break;
    const int q = std::min({r.total_len() - r.num_computed, config_.chunked_prefill_size, budget});
    if (!try_allocate(q, r.slots)) {  // admit() checked capacity, so this is a bug
      release(r, false);
      fail("scheduler: admitted request {} but could not allocate {} slots", r.rid, q);
    }
    reserved += pending_tokens(r);
    budget -= q;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    rows.push_back(Row{&r, q, r.num_computed + q == r.total_len()});
  }
  return rows;
}

int64_t Scheduler::pending_tokens(const Request& r) const {
  return std::max<int64_t>(0, r.total_len() - static_cast<int64_t>(r.slots.size())) + decode_reserve(r);
}

int64_t Scheduler::decode_reserve(const Request& r) const {
  const int64_t left = max_new_tokens_estimate(r) - static_cast<int64_t>(r.output_ids.size());
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(left) * new_token_ratio_)));
}

bool Scheduler::admit(Request& r, int64_t reserved) {
  std::vector<int32_t> tokens(static_cast<size_t>(r.total_len()));
  for (int i = 0; i < r.total_len(); ++i) tokens[static_cast<size_t>(i)] = r.token_at(i);
  // Leave at least one token to compute: its logits pick the next token. Prompt log probabilities
  // need the logits of every position before their first token, so those are computed anew.
  int reuse = r.total_len() - 1;
  if (r.wants_prompt_logprobs()) reuse = std::min(reuse, std::max(0, r.params.prompt_logprobs_start - 1));
  RadixCache::MatchResult m = radix_.match_prefix(tokens, reuse);
  radix_.inc_ref(m.node);
  const int64_t remaining = r.total_len() - static_cast<int64_t>(m.slots.size());
  // Room for the whole remaining prompt and the decode reservation of everyone running and of r;
  // with nothing running, the prompt and one token, so that a request too long to reserve for
  // still runs (it finishes by length if the pool runs out).
  const int64_t need = remaining + (running_.empty() ? 1 : reserved + decode_reserve(r));
  if (slots_.num_slots_free() + radix_.evictable_size() < need) {
    radix_.dec_ref(m.node);
    return false;
  }
  r.slots = std::move(m.slots);
  r.prefix_len = r.num_computed = static_cast<int>(r.slots.size());
  r.node = m.node;
  r.table_row = table_.allocate();  // rows bound running requests, as max_running_requests does
  if (!r.admitted_before) {
    r.cached_tokens = r.prefix_len;
    counters_.cached_prompt_tokens += r.prefix_len;
    counters_.prompt_tokens += static_cast<int64_t>(r.input_ids.size());
    r.admitted_before = true;
  }
  return true;
}

void Scheduler::retract_newest() {
  std::unique_ptr<Request> r = std::move(running_.back());
  running_.pop_back();
  release(*r, true);
  counters_.num_retractions++;
  spdlog::debug("retracted request {} ({} tokens computed)", r->rid, r->num_computed);
  r->num_computed = 0;
  r->prefix_len = 0;
  waiting_.push_front(std::move(r));
}

void Scheduler::release(Request& r, bool keep_in_cache) {
  const size_t n = static_cast<size_t>(r.num_computed);
  std::span<const int32_t> all(r.slots);
  if (keep_in_cache) {
    std::vector<int32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = r.token_at(static_cast<int>(i));
    const RadixCache::InsertResult res = radix_.insert(tokens, all.first(n));
    slots_.free(res.duplicates);
    slots_.free(all.subspan(n));  // allocated for this step, never computed
  } else {
    slots_.free(all.subspan(static_cast<size_t>(r.prefix_len)));
  }
  radix_.dec_ref(r.node);
  r.node = radix_.root();
  r.slots.clear();
  if (r.table_row >= 0) table_.free(r.table_row);
  r.table_row = -1;
}

void Scheduler::finish(Request& r, FinishReason reason) {
  r.finish = reason;
  release(r, true);
  counters_.num_finished++;
  emit(r, {});
}

Tensor Scheduler::run(const std::vector<Row>& rows) {
  ForwardBatch& b = batch_;
  b.clear();
  for (const Row& row : rows) {
    const Request& r = *row.req;
    tokens_.clear();
    for (int i = r.num_computed; i < r.num_computed + row.q_len; ++i) tokens_.push_back(r.token_at(i));
    const int kv_len = r.num_computed + row.q_len;
    b.add_sequence(r.table_row, kv_len, tokens_, table_.take_new(r.table_row, r.slots, kv_len));
  }
  forward_start_ = Clock::now();
  return model_.forward(b, kv_);
}

void Scheduler::postprocess(const std::vector<Row>& rows, const Tensor& logits) {
  // Grammar work first, while the device computes the logits: each constrained row takes the token
  // it drew last step (accepting costs tens of microseconds a row), then its next mask is filled.
  mask_rows_.clear();
  mask_matchers_.clear();
  mask_requests_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    Request& r = *rows[i].req;
    if (!rows[i].samples || !r.params.compiled_grammar) continue;
    if (!r.grammar) r.grammar = std::make_unique<GrammarMatcher>(r.params.compiled_grammar);
    mask_rows_.push_back(static_cast<int32_t>(i));
    mask_matchers_.push_back(r.grammar.get());
    mask_requests_.push_back(&r);
  }
  const auto pending = static_cast<int64_t>(mask_requests_.size());
#pragma omp parallel for schedule(static) if (pending >= 8)
  for (int64_t k = 0; k < pending; ++k) {
    Request& r = *mask_requests_[static_cast<size_t>(k)];
    if (r.grammar_pending >= 0 && !r.grammar->accept(r.grammar_pending))  // only a bug can get here
      spdlog::error("request {}: the grammar refused token {}, which its mask allowed", r.rid, r.grammar_pending);
    r.grammar_pending = -1;
  }
  if (!mask_rows_.empty()) {
    if (!mask_filler_) mask_filler_ = std::make_unique<GrammarMaskFiller>(config_.grammar_threads);
    mask_words_.resize(mask_matchers_.size() * static_cast<size_t>(mask_matchers_[0]->mask_words()));
    mask_filler_->fill(mask_matchers_, mask_words_);
  }
  std::vector<SamplingRow> params(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Request& r = *rows[i].req;
    params[i] = SamplingRow{r.params.temperature, r.params.top_p, r.params.top_k,
                            r.params.min_p,       r.seed,         static_cast<uint64_t>(r.output_ids.size())};
  }
  edits_.clear();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].samples) append_logit_edits(*rows[i].req, static_cast<int32_t>(i), eos_ids_, edits_);
  if (!edits_.empty()) model_.backend().edit_logits(logits, edits_);
  if (!mask_rows_.empty()) model_.backend().mask_logits(logits, mask_rows_, mask_words_);
  sampled_.assign(rows.size(), 0);
  model_.backend().sample(logits, params, sampled_.data());
  // Sampling returns the ids to the host, so this is when the device finished the step's work.
  last_device_seconds_ = std::chrono::duration<double>(Clock::now() - forward_start_).count();
  // Log probabilities of the tokens just drawn, from the same logits, for the rows that asked
  // (after the device time is taken: they are host work on rows copied back).
  std::vector<int32_t> lp_rows, lp_ids;
  int top_n = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].samples || rows[i].req->params.logprobs < 0) continue;
    lp_rows.push_back(static_cast<int32_t>(i));
    lp_ids.push_back(sampled_[i]);
    top_n = std::max(top_n, rows[i].req->params.logprobs);
  }
  std::vector<std::optional<RowLogprobs>> lps;  // by row, only on steps where a row asked
  if (!lp_rows.empty()) {
    lps.resize(rows.size());
    std::vector<RowLogprobs> got = model_.backend().logprobs(logits, lp_rows, lp_ids, top_n);
    for (size_t j = 0; j < lp_rows.size(); ++j) {
      RowLogprobs& lp = got[j];
      lp.top.resize(std::min(lp.top.size(), static_cast<size_t>(rows[lp_rows[j]].req->params.logprobs)));
      lps[static_cast<size_t>(lp_rows[j])] = std::move(lp);
    }
  }
  const auto lp_of = [&lps](size_t i) -> const RowLogprobs* { return lps.empty() || !lps[i] ? nullptr : &*lps[i]; };
  prompt_logprobs(rows);
  std::vector<std::pair<Request*, size_t>> done;
  for (size_t i = 0; i < rows.size(); ++i) {
    Request& r = *rows[i].req;
    r.num_computed += rows[i].q_len;
    if (!rows[i].samples) continue;
    const int32_t token = sampled_[i];
    r.output_ids.push_back(token);
    note_sampled(r, token);
    if (r.grammar) r.grammar_pending = token;  // accepted at the next step, beside the device's work
    counters_.generation_tokens++;
    if (check_stop(r, token)) {
      done.emplace_back(&r, i);
    } else {
      emit(r, {token}, lp_of(i));
    }
  }
  for (const auto& d : done) {
    Request* r = d.first;
    const size_t i = d.second;
    release(*r, true);
    counters_.num_finished++;
    emit(*r, {r->output_ids.back()}, lp_of(i));
    auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == r; });
    running_.erase(it);
  }
}

bool Scheduler::check_stop(Request& r, int32_t token) {
  const SamplingParams& p = r.params;
  // A grammar's mask lets EOS through only where the grammar is complete: then it ends the request
  // even with ignore_eos, since nothing may follow.
  if ((!p.ignore_eos || r.grammar) && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) {
    r.finish = FinishReason::kStop;
    r.matched_stop = std::to_string(token);
    return true;
  }
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    r.finish = FinishReason::kStop;
    r.matched_stop = std::to_string(token);
    return true;
  }
  if (r.stop_detok) {
    const size_t before = r.stop_text.size();
    r.stop_text += r.stop_detok->push(token);
    for (const std::string& s : p.stop) {
      const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
      if (r.stop_text.find(s, from) != std::string::npos) {
        r.finish = FinishReason::kStop;
        r.matched_stop = s;
        return true;
      }
    }
  }
  if (static_cast<int>(r.output_ids.size()) >= p.max_new_tokens || r.total_len() >= config_.context_length) {
    r.finish = FinishReason::kLength;
    return true;
  }
  return false;
}

void Scheduler::prompt_logprobs(const std::vector<Row>& rows) {
  struct Need {
    Request* req;
    int32_t token_row;  // row of the step's tokens whose logits predict `next`
    int32_t next;
    size_t index;  // into req->prompt_logprobs
  };
  std::vector<Need> need;
  int32_t offset = 0;
  int top_n = 0;
  for (const Row& row : rows) {
    Request& r = *row.req;
    const int n = static_cast<int>(r.input_ids.size()), start = r.params.prompt_logprobs_start;
    if (r.wants_prompt_logprobs() && start < n) {
      if (r.prompt_logprobs.size() != static_cast<size_t>(n - start)) {
        r.prompt_logprobs.assign(static_cast<size_t>(n - start), RowLogprobs{});
        if (start == 0) r.prompt_logprobs[0].chosen = std::numeric_limits<float>::quiet_NaN();  // nothing before it
      }
      for (int j = 0; j < row.q_len; ++j) {
        const int next = r.num_computed + j + 1;  // the token this row's logits predict
        if (next >= std::max(start, 1) && next < n)
          need.push_back({&r, offset + j, r.input_ids[static_cast<size_t>(next)], static_cast<size_t>(next - start)});
      }
      top_n = std::max(top_n, std::max(r.params.logprobs, 0));
    }
    offset += row.q_len;
  }
  const size_t chunk = static_cast<size_t>(model_.max_seqs());
  for (size_t at = 0; at < need.size(); at += chunk) {
    const size_t k = std::min(chunk, need.size() - at);
    std::vector<int32_t> token_rows(k), logit_rows(k), chosen(k);
    for (size_t i = 0; i < k; ++i) {
      token_rows[i] = need[at + i].token_row;
      logit_rows[i] = static_cast<int32_t>(i);
      chosen[i] = need[at + i].next;
    }
    const Tensor logits = model_.logits_of_rows(token_rows);
    std::vector<RowLogprobs> got = model_.backend().logprobs(logits, logit_rows, chosen, top_n);
    for (size_t i = 0; i < k; ++i) {
      Need& nd = need[at + i];
      got[i].top.resize(std::min(got[i].top.size(), static_cast<size_t>(std::max(nd.req->params.logprobs, 0))));
      nd.req->prompt_logprobs[nd.index] = std::move(got[i]);
    }
  }
}

void Scheduler::emit(Request& r, std::vector<int32_t> new_ids, const RowLogprobs* logprobs) {
  if (!r.sink) return;
  OutputEvent ev;
  if (r.params.prompt_logprobs_start >= 0 && !r.prompt_logprobs_sent &&
      (!new_ids.empty() || r.finish != FinishReason::kNone)) {
    ev.prompt_logprobs = std::move(r.prompt_logprobs);
    r.prompt_logprobs_sent = true;
  }
  ev.new_ids = std::move(new_ids);
  if (logprobs) ev.logprobs.push_back(*logprobs);
  ev.finished = r.finish != FinishReason::kNone;
  ev.reason = r.finish;
  ev.matched_stop = r.matched_stop;
  ev.prompt_tokens = static_cast<int>(r.input_ids.size());
  ev.completion_tokens = static_cast<int>(r.output_ids.size());
  ev.cached_tokens = r.cached_tokens;
  r.sink(ev);
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = counters_;
  s.num_running = static_cast<int>(running_.size());
  s.num_waiting = static_cast<int>(waiting_.size());
  s.slots_free = slots_.num_slots_free();
  s.slots_cached = radix_.evictable_size();
  s.radix_hit_rate = radix_.stats().hit_rate();
  return s;
}

void Scheduler::check_invariants() const {
  int64_t held = 0;
  for (const auto& r : running_) held += static_cast<int64_t>(r->slots.size()) - r->prefix_len;
  for (const auto& r : waiting_) SERVE8_CHECK(r->slots.empty(), "waiting request {} holds slots", r->rid);
  const int64_t total = slots_.num_slots_free() + radix_.total_size() + held;
  SERVE8_CHECK(total == slots_.num_slots_total(),
               "slot accounting: {} free + {} in the tree + {} held by requests != {} slots", slots_.num_slots_free(),
               radix_.total_size(), held, slots_.num_slots_total());
  SERVE8_CHECK(table_.num_rows_used() == static_cast<int>(running_.size()),
               "request table: {} rows in use for {} running requests", table_.num_rows_used(), running_.size());
  radix_.validate();
}

}  // namespace serve8
