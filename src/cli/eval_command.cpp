// `serve8 eval`: accuracy tools. kld (eval_kld.cpp) runs in process; gsm8k and mmlu are to come.
#include "cli/commands.h"

namespace serve8 {

void register_eval_kld(CLI::App& eval, SetAction set_action);

void register_eval(CLI::App& root, SetAction set_action) {
  CLI::App* eval = root.add_subcommand("eval", "accuracy: KL divergence of a KV dtype");
  eval->require_subcommand(1);
  register_eval_kld(*eval, set_action);
}

}  // namespace serve8
