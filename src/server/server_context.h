// ServerContext: what every route handler shares: the engine, the options, the metrics and the
// bookkeeping of requests in flight. Handlers run on many threads; everything here is safe to use
// from any of them.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <memory>
#include <string>
#include <unordered_set>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/tool_calls.h"

namespace serve8 {

struct ServerContext {
  ServerContext(Engine& engine, const EngineArgs& engine_args, const ServerOptions& options);

  Engine& engine;
  const EngineArgs engine_args;
  const ServerOptions options;
  const int64_t created_unix;  // server start, for OpenAI's "created" of /v1/models
  Metrics metrics;
  std::atomic<int64_t> in_flight{0};  // generation requests submitted and not yet answered
  std::atomic<bool> draining{false};  // shutting down: new generation requests get 503
  // The markup tool_choice "auto" reads calls in: --tool-call-parser's, else the chat template's.
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;

  const Tokenizer* tokenizer() const { return engine.tokenizer(); }
  int vocab_size() const { return engine.model_config().vocab_size; }
  int context_length() const { return engine.context_length(); }
  // The prompt's ids; a text that cannot fit the context whatever it tokenizes to (longer than
  // context_length() of the vocabulary's longest tokens, four times over) is refused before the
  // tokenizer spends seconds on it. Throws the 400 naming `param`.
  std::vector<int32_t> encode_prompt(const std::string& text, const std::string& param) const;
  void check_prompt_bytes(size_t bytes, const std::string& param) const;

  // The grammar of `spec`, compiled against this model's vocabulary (the compiler is built on first
  // use: it indexes the vocabulary once). A spec that does not compile is a 400 naming `param`.
  std::shared_ptr<const Grammar> compile_grammar(const GrammarSpec& spec, const std::string& param) const;

  // A fresh request id (32 hex digits, as SGLang's).
  std::string new_request_id();
  // Claims a request id for the duration of a request; false when a live request holds it (aborts
  // go by id, so two live requests must never share one).
  bool claim_rid(const std::string& rid);
  void release_rid(const std::string& rid);

 private:
  std::mutex mu_;
  std::unordered_set<std::string> active_rids_;
  uint64_t id_state_;
  size_t longest_token_bytes_ = 0;  // of the tokenizer's vocabulary; 0 without a tokenizer
  mutable std::once_flag grammar_once_;
  mutable std::unique_ptr<GrammarCompiler> grammar_compiler_;
};

}  // namespace serve8
