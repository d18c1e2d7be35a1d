// `serve8 generate`: one prompt through the engine in this process, completion to stdout.
#include <algorithm>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/error.h"
#include "core/log.h"
#include "tokenizer/incremental_detokenizer.h"

namespace serve8 {

namespace {

struct GenerateArgs {
  EngineArgs engine;
  SamplingParams sampling;
  std::string prompt;
  std::string prompt_ids;
  bool output_ids = false;
  bool pool_given = false;     // --max-total-tokens
  bool running_given = false;  // --max-running-requests
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string tok;
  while (in >> tok) {
    try {
      size_t used = 0;
      const long v = std::stol(tok, &used);
      SERVE8_CHECK(used == tok.size(), "");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      fail("--prompt-ids: '{}' is not a token id", tok);
    }
  }
  return ids;
}

int run_generate(const GenerateArgs& a) {
  SERVE8_CHECK(a.prompt.empty() != a.prompt_ids.empty(), "generate: give exactly one of --prompt and --prompt-ids");
  // One request: a KV pool of its size, not the server's default (allocating and zeroing that
  // took most of a short run), and a batch of one.
  EngineArgs args = a.engine;
  if (!a.pool_given) {
    // A text prompt has at most one token per byte, plus the ones the tokenizer adds.
    const int64_t prompt = a.prompt_ids.empty() ? static_cast<int64_t>(a.prompt.size()) + 8
                                                : static_cast<int64_t>(parse_ids(a.prompt_ids).size());
    args.max_total_tokens = prompt + std::max(a.sampling.max_new_tokens, 0) + 1;
  }
  if (!a.running_given) args.scheduler.max_running_requests = 1;
  std::unique_ptr<Engine> engine = create_engine(args);
  std::vector<int32_t> ids;
  if (!a.prompt_ids.empty()) {
    ids = parse_ids(a.prompt_ids);
  } else {
    SERVE8_CHECK(engine->tokenizer() != nullptr,
                 "generate: --prompt needs a tokenizer (use --prompt-ids or --tokenizer-path)");
    ids = engine->tokenizer()->encode(a.prompt, true);
  }
  auto stream = engine->submit(ids, a.sampling);
  engine->run_until_idle();
  std::vector<int32_t> out;
  std::unique_ptr<IncrementalDetokenizer> detok;
  if (!a.output_ids && engine->tokenizer()) detok = std::make_unique<IncrementalDetokenizer>(*engine->tokenizer());
  for (;;) {
    std::optional<OutputEvent> ev = stream->next(std::chrono::milliseconds(0));
    SERVE8_CHECK(ev.has_value(), "generate: the engine went idle before the request finished");
    SERVE8_CHECK(ev->error.empty(), "generate: {}", ev->error);
    for (int32_t id : ev->new_ids) {
      out.push_back(id);
      if (detok) std::cout << detok->push(id) << std::flush;
    }
    if (ev->finished) {
      if (detok) std::cout << detok->flush() << "\n";
      spdlog::info("generate: {} prompt tokens, {} generated, finish_reason {}", ev->prompt_tokens,
                   ev->completion_tokens, finish_reason_name(ev->reason));
      break;
    }
  }
  if (!detok) {
    for (size_t i = 0; i < out.size(); ++i) std::cout << (i ? " " : "") << out[i];
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

void register_generate(CLI::App& root, std::function<void(std::function<int()>)> set_action) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* app = root.add_subcommand("generate", "generate a completion for one prompt, in process");
  add_engine_options(*app, a->engine);
  add_sampling_options(*app, a->sampling);
  app->add_option("--prompt", a->prompt, "prompt text");
  app->add_option("--prompt-ids", a->prompt_ids, "prompt token ids, separated by spaces");
  app->add_flag("--output-ids", a->output_ids, "print generated token ids instead of text");
  app->callback([a, app, set_action] {
    a->pool_given = app->count("--max-total-tokens") > 0;
    a->running_given = app->count("--max-running-requests") > 0;
    set_action([a] { return run_generate(*a); });
  });
}

}  // namespace serve8
