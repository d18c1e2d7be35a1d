// `serve8 convert llama2c`: a llama2.c checkpoint to an HF-format directory; `convert fp8`
// (convert_fp8.cpp): a checkpoint to an FP8 one.
#include "cli/commands.h"
#include "core/log.h"
#include "model/llama2c_convert.h"

namespace serve8 {

void register_convert(CLI::App& root, SetAction set_action) {
  CLI::App* convert = root.add_subcommand("convert", "convert a checkpoint to an HF-format directory");
  convert->require_subcommand(1);
  struct Args {
    std::string checkpoint, output, tokenizer;
  };
  auto a = std::make_shared<Args>();
  CLI::App* l2c = convert->add_subcommand("llama2c", "from a llama2.c checkpoint (.bin)");
  l2c->add_option("--checkpoint", a->checkpoint, "llama2.c checkpoint file")->required();
  l2c->add_option("--output", a->output, "output directory")->required();
  l2c->add_option("--tokenizer", a->tokenizer, "tokenizer.model to copy beside the weights");
  l2c->callback([a, set_action] {
    set_action([a] {
      convert_llama2c(a->checkpoint, a->output, a->tokenizer);
      spdlog::info("wrote {}", a->output);
      return 0;
    });
  });
  register_convert_fp8(*convert, set_action);
}

}  // namespace serve8
