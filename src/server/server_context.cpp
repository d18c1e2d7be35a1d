#include "server/server_context.h"

#include <algorithm>
#include <ctime>
#include <random>
#include <span>

#include "core/error.h"
#include "core/log.h"
#include "server/api_error.h"
#include "tokenizer/jinja_chat_template.h"

namespace serve8 {

ServerContext::ServerContext(Engine& e, const EngineArgs& args, const ServerOptions& opts)
    : engine(e),
      engine_args(args),
      options(opts),
      created_unix(static_cast<int64_t>(std::time(nullptr))),
      id_state_(std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)) {
  if (const Tokenizer* t = e.tokenizer()) {
    for (int32_t id = 0; id < t->vocab_size(); ++id)
      longest_token_bytes_ = std::max(longest_token_bytes_, t->decode(std::span<const int32_t>(&id, 1), false).size());
  }
  if (!options.tool_call_parser.empty()) {
    const std::optional<ToolCallFormat> format = tool_call_format_from_name(options.tool_call_parser);
    SERVE8_CHECK(format.has_value(), "--tool-call-parser: unknown parser '{}' (known: {})", options.tool_call_parser,
                 tool_call_parser_names());
    tool_call_format = *format;
  } else if (e.tokenizer() != nullptr && e.tokenizer()->jinja_chat_template() != nullptr) {
    tool_call_format = detect_tool_call_format(e.tokenizer()->jinja_chat_template()->source());
    if (tool_call_format != ToolCallFormat::kNone)
      spdlog::info("tool calls: the chat template writes them as {} does (--tool-call-parser replaces it)",
                   tool_call_format_name(tool_call_format));
  }
}

void ServerContext::check_prompt_bytes(size_t bytes, const std::string& param) const {
  const uint64_t limit = 4ull * static_cast<uint64_t>(context_length()) * std::max<size_t>(longest_token_bytes_, 1);
  if (bytes > limit)
    throw_invalid(param,
                  "The prompt has {} bytes: more than this model's maximum context length of {} tokens can hold "
                  "(its longest token has {} bytes)",
                  bytes, context_length(), longest_token_bytes_);
}

std::shared_ptr<const Grammar> ServerContext::compile_grammar(const GrammarSpec& spec, const std::string& param) const {
  const Tokenizer* tok = tokenizer();
  if (tok == nullptr) throw_invalid(param, "Constrained decoding needs a tokenizer, and this model has none");
  std::call_once(grammar_once_, [this, tok] {
    grammar_compiler_ = std::make_unique<GrammarCompiler>(*tok, vocab_size(), tok->eos_ids());
  });
  try {
    return grammar_compiler_->compile(spec);
  } catch (const Error& e) {
    throw_invalid(param, "'{}' does not compile: {}", param, e.what());
  }
}

std::vector<int32_t> ServerContext::encode_prompt(const std::string& text, const std::string& param) const {
  check_prompt_bytes(text.size(), param);
  // A long text is tokenized in part first: when its first 4 x context-length bytes already make
  // more tokens than the context holds (a margin for the cut), the rest is never tokenized.
  constexpr size_t kCutMargin = 16;
  const size_t probe = 4 * static_cast<size_t>(context_length());
  if (text.size() > probe) {
    size_t cut = probe;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // a UTF-8 boundary
    const size_t n = tokenizer()->encode(std::string_view(text).substr(0, cut), true).size();
    if (n > static_cast<size_t>(context_length()) + kCutMargin)
      throw_invalid(param,
                    "The prompt has more than {} tokens in its first {} bytes alone: more than this model's maximum "
                    "context length of {} tokens",
                    n - kCutMargin, cut, context_length());
  }
  return tokenizer()->encode(text, true);
}

std::string ServerContext::new_request_id() {
  std::lock_guard<std::mutex> lk(mu_);
  // splitmix64: distinct ids from one random seed, cheap under the lock.
  auto next = [this] {
    uint64_t z = (id_state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const uint64_t a = next();
  const uint64_t b = next();
  return fmt::format("{:016x}{:016x}", a, b);
}

bool ServerContext::claim_rid(const std::string& rid) {
  std::lock_guard<std::mutex> lk(mu_);
  return active_rids_.insert(rid).second;
}

void ServerContext::release_rid(const std::string& rid) {
  std::lock_guard<std::mutex> lk(mu_);
  active_rids_.erase(rid);
}

}  // namespace serve8
