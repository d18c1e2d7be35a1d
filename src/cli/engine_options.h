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

// serve's default model, SmolLM2-135M-Instruct as scripts/setup.sh fetches it (kDefaultModelFile in
// $SERVE8_MODELS_DIR, else in .models of the working directory or of the checkout holding this
// binary's build folder); "" when it is in none of them.
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
std::string find_default_model();

}  // namespace serve8
