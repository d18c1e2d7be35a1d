// serve8: one binary, one subcommand per job.
#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/build_info.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace {
std::string g_command_line;
}

const std::string& serve8::invoked_command_line() { return g_command_line; }

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(i ? argv[i] : "serve8");
  CLI::App app{"serve8: an LLM serving engine with an FP8 KV cache"};
  app.set_version_flag("--version", std::string("serve8 ") + serve8::build_commit());
  app.require_subcommand(1);
  app.fallthrough();
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug | info | warning | error");
  std::function<int()> action;
  auto set_action = [&action](std::function<int()> f) { action = std::move(f); };
  serve8::register_generate(app, set_action);
  serve8::register_convert(app, set_action);
  serve8::register_serve(app, set_action);
  serve8::register_bench_one_batch(app, set_action);
  serve8::register_dump_logits(app, set_action);
  serve8::register_bench_offline(app, set_action);
  serve8::register_bench_serving(app, set_action);
  serve8::register_calibrate(app, set_action);
  serve8::register_eval(app, set_action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  serve8::init_logging(log_level);
  try {
    return action ? action() : 0;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
}
