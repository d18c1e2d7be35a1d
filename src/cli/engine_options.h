// The engine flags every subcommand that loads a model shares, spelled as SGLang spells them.
#pragma once

#include <CLI/CLI.hpp>

#include "engine/engine.h"

namespace serve8 {

void add_engine_options(CLI::App& app, EngineArgs& args);
void add_sampling_options(CLI::App& app, SamplingParams& params);
// No --model-path: the built-in tiny dummy Llama, with the Llama-2 tokenizer from ../shared
// (or beside the source tree) unless --tokenizer-path names one.
void default_to_builtin_model(EngineArgs& args);

}  // namespace serve8
