#include "server/generation.h"

#include <algorithm>

#include "core/log.h"

namespace serve8 {

namespace {
constexpr size_t kMaxRidBytes = 256;
}  // namespace

void check_generation_input(const ServerContext& ctx, GenerationInput& in, const std::string& param,
                            const std::string& max_param) {
  // A client's rid is written to the log and matched by /abort_request: no control characters (a
  // newline would forge log lines), and a bounded length.
  if (in.rid.size() > kMaxRidBytes || std::any_of(in.rid.begin(), in.rid.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      }))
    throw_invalid("rid", "'rid' must be at most {} bytes without control characters", kMaxRidBytes);
  const int n = static_cast<int>(in.input_ids.size());
  const int context = ctx.context_length();
  if (n == 0) throw_invalid(param, "The prompt is empty");
  for (int32_t id : in.input_ids)
    if (id < 0 || id >= ctx.vocab_size())
      throw_invalid(param, "Token id {} is outside the vocabulary [0, {})", id, ctx.vocab_size());
  if (n >= context)
    throw_invalid(param, "This model's maximum context length is {} tokens, but the prompt has {} tokens", context, n);
  const int64_t pool = ctx.engine.stats().slots_total;
  if (n + 1 > pool) throw_invalid(param, "The prompt has {} tokens, but the KV pool holds only {}", n, pool);
  SamplingParams& p = in.params;
  if (p.max_new_tokens < 0) throw_invalid(max_param, "'{}' must be >= 0, got {}", max_param, p.max_new_tokens);
  if (in.max_new_tokens_given) {
    if (static_cast<int64_t>(n) + p.max_new_tokens > context)
      throw_invalid(max_param,
                    "This model's maximum context length is {} tokens; the prompt has {} and {} more were "
                    "requested, {} in all",
                    context, n, p.max_new_tokens, static_cast<int64_t>(n) + p.max_new_tokens);
  } else {
    p.max_new_tokens = std::min(p.max_new_tokens, context - n);
  }
  if (!p.stop.empty() && ctx.tokenizer() == nullptr)
    throw_invalid("stop", "Stop strings need a tokenizer, and this model has none (use stop_token_ids)");
  const std::string error = p.validate(ctx.vocab_size());
  if (!error.empty()) throw invalid_request(error);
  if (!p.grammar.empty() && !p.compiled_grammar) p.compiled_grammar = ctx.compile_grammar(p.grammar, p.grammar.source);
}

GenerationRun::GenerationRun(ServerContext& ctx, std::vector<GenerationInput> inputs, Clock::time_point received,
                             bool share_prefill)
    : ctx_(ctx), inputs_(std::move(inputs)), received_(received) {
  const auto n = static_cast<int64_t>(inputs_.size());
  // Counted before the draining check: shutdown sets `draining` and then waits for in_flight to
  // drop, so a request that passes the check is always one it waits for.
  ctx_.in_flight += n;
  try {
    if (ctx_.draining || !ctx_.engine.accepting()) throw server_overloaded("The server is shutting down");
    if (ctx_.options.max_queued_requests > 0) {
      // Requests not running (the engine's queue, or those in flight it has not published yet)
      // beyond the running slots still free: those the next step starts are not queued.
      const SchedulerStats s = ctx_.engine.stats();
      const int64_t not_running = std::max<int64_t>(s.num_waiting, ctx_.in_flight.load() - n - s.num_running);
      const int64_t free_running = ctx_.engine_args.scheduler.max_running_requests - s.num_running;
      const int64_t waiting = std::max<int64_t>(0, not_running - free_running);
      if (waiting + n > ctx_.options.max_queued_requests)
        throw server_overloaded(
            fmt::format("The server is overloaded: {} requests are queued (--max-queued-requests {})", waiting,
                        ctx_.options.max_queued_requests));
    }
    for (GenerationInput& in : inputs_) {
      std::string rid = in.rid.empty() ? ctx_.new_request_id() : in.rid;
      if (!ctx_.claim_rid(rid)) throw_invalid("rid", "A request with rid '{}' is already running", rid);
      rids_.push_back(std::move(rid));
    }
  } catch (...) {
    for (const std::string& r : rids_) ctx_.release_rid(r);
    ctx_.in_flight -= n;
    throw;
  }
  e2e_.assign(inputs_.size(), 0.0);
  last_token_.assign(inputs_.size(), 0.0);
  aborted_.assign(inputs_.size(), false);
  for (size_t i = 0; i < inputs_.size(); ++i)
    outputs_.push_back(std::make_unique<TextOutput>(ctx_.tokenizer(), inputs_[i].params, inputs_[i].input_ids));
  streams_.assign(inputs_.size(), nullptr);
  const bool same_prompt = std::all_of(inputs_.begin(), inputs_.end(),
                                       [&](const GenerationInput& in) { return in.input_ids == inputs_[0].input_ids; });
  if (share_prefill && inputs_.size() > 1 && same_prompt && !ctx_.engine_args.scheduler.disable_radix_cache &&
      ctx_.claim_rid(rids_[0] + "-prefill")) {
    warmup_rid_ = rids_[0] + "-prefill";
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_new_tokens = 1;
    p.ignore_eos = true;
    warmup_ = ctx_.engine.submit(inputs_[0].input_ids, p, warmup_rid_);
    return;
  }
  for (size_t i = 0; i < inputs_.size(); ++i) submit(i);
}

void GenerationRun::submit(size_t i) {
  streams_[i] = ctx_.engine.submit(inputs_[i].input_ids, inputs_[i].params, rids_[i]);
  if (wake_) streams_[i]->set_listener(wake_);
}

void GenerationRun::take_warmup(std::chrono::milliseconds wait) {
  while (warmup_) {
    std::optional<OutputEvent> ev = warmup_->next(wait);
    if (!ev) return;
    if (!ev->finished) continue;
    warmup_->set_listener(nullptr);
    warmup_.reset();
    if (cancelled_) return;
    for (size_t i = 0; i < inputs_.size(); ++i) submit(i);
  }
}

GenerationRun::~GenerationRun() {
  on_output(nullptr);
  abort();
  for (const std::string& r : rids_) ctx_.release_rid(r);
  if (!warmup_rid_.empty()) ctx_.release_rid(warmup_rid_);
  ctx_.in_flight -= static_cast<int64_t>(inputs_.size());
}

void GenerationRun::abort() {
  cancelled_ = true;
  if (warmup_) ctx_.engine.abort(warmup_rid_);
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i]->finished() || aborted_[i]) continue;
    spdlog::debug("aborting request {}", rids_[i]);
    if (streams_[i]) ctx_.engine.abort(rids_[i]);
    // Nobody reads the abort event that comes back, so count the abort here.
    aborted_[i] = true;
    ctx_.metrics.count_finished(FinishReason::kAbort);
  }
}

void GenerationRun::apply_event(size_t i, const OutputEvent& ev) {
  TextOutput& out = *outputs_[i];
  const int tokens_before = out.completion_tokens();
  out.apply(ev);
  const double since = std::chrono::duration<double>(Clock::now() - received_).count();
  if (const int new_tokens = out.completion_tokens() - tokens_before; new_tokens > 0) {
    if (tokens_before == 0)
      ctx_.metrics.observe_ttft(since);
    else
      ctx_.metrics.observe_inter_token(since - last_token_[i], new_tokens);
    last_token_[i] = since;
  }
  if (!out.finished()) return;
  num_finished_++;
  if (aborted_[i]) return;  // counted when it was aborted
  e2e_[i] = since;
  if (out.error().empty()) ctx_.metrics.observe_e2e(since);
  ctx_.metrics.count_finished(out.reason());
}

bool GenerationRun::drain_events(size_t i) {
  if (!streams_[i]) return false;
  bool changed = false;
  while (!outputs_[i]->finished()) {
    std::optional<OutputEvent> ev = streams_[i]->next(std::chrono::milliseconds(0));
    if (!ev) break;
    apply_event(i, *ev);
    changed = true;
  }
  return changed;
}

std::vector<size_t> GenerationRun::poll(std::chrono::milliseconds timeout) {
  std::vector<size_t> changed;
  changed.swap(changed_before_);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (warmup_) {
      take_warmup(std::chrono::duration_cast<std::chrono::milliseconds>(std::max(deadline - Clock::now(), Clock::duration{})));
      if (warmup_) return changed;  // still prefilling (or the wait is over)
    }
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (drain_events(i) && std::find(changed.begin(), changed.end(), i) == changed.end()) changed.push_back(i);
    const auto now = Clock::now();
    if (!changed.empty() || all_finished() || now >= deadline) return changed;
    // Block on one unfinished stream; with several, wake often enough to see the others.
    const size_t first = static_cast<size_t>(
        std::find_if(outputs_.begin(), outputs_.end(), [](const auto& o) { return !o->finished(); }) -
        outputs_.begin());
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) + std::chrono::milliseconds(1);
    if (outputs_.size() > 1) wait = std::min(wait, std::chrono::milliseconds(2));
    if (std::optional<OutputEvent> ev = streams_[first]->next(wait)) {
      apply_event(first, *ev);
      changed.push_back(first);
    }
  }
}

std::optional<ApiError> GenerationRun::check_start() {
  for (size_t i : poll(std::chrono::milliseconds(0)))
    if (std::find(changed_before_.begin(), changed_before_.end(), i) == changed_before_.end())
      changed_before_.push_back(i);
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const TextOutput& out = *outputs_[i];
    if (out.error().empty()) continue;
    if (!ctx_.engine.accepting()) return server_overloaded(out.error());
    return invalid_request(out.error());
  }
  return std::nullopt;
}

bool GenerationRun::started() const {
  return std::all_of(outputs_.begin(), outputs_.end(), [](const auto& o) { return o->num_events() > 0; });
}

void GenerationRun::on_output(const std::function<void()>& wake) {
  wake_ = wake;
  if (warmup_) warmup_->set_listener(wake);
  for (const auto& s : streams_)
    if (s) s->set_listener(wake);
}

}  // namespace serve8
