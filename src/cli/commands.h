// Each subcommand registers its flags on the root app and, when chosen, hands main() the action
// to run after parsing.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace serve8 {

using SetAction = std::function<void(std::function<int()>)>;

void register_generate(CLI::App& root, SetAction set_action);
void register_convert(CLI::App& root, SetAction set_action);
void register_convert_fp8(CLI::App& convert, SetAction set_action);
void register_serve(CLI::App& root, SetAction set_action);
void register_bench_one_batch(CLI::App& root, SetAction set_action);
void register_dump_logits(CLI::App& root, SetAction set_action);
void register_bench_offline(CLI::App& root, SetAction set_action);
void register_bench_serving(CLI::App& root, SetAction set_action);
void register_calibrate(CLI::App& root, SetAction set_action);
void register_eval(CLI::App& root, SetAction set_action);

struct BenchDatasetOptions;
// The dataset flags of bench-offline (and bench-serving): SGLang's names.
void add_dataset_options(CLI::App& app, BenchDatasetOptions& options);

// The command line serve8 was started with, for the records benchmarks write.
const std::string& invoked_command_line();

}  // namespace serve8
