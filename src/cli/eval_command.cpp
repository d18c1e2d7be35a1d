// `serve8 eval`: accuracy tools. kld (eval_kld.cpp) runs in process; gsm8k and mmlu
// (eval_server.cpp) ask a running server.
#include "cli/commands.h"

namespace serve8 {

void register_eval_kld(CLI::App& eval, SetAction set_action);
void register_eval_server(CLI::App& eval, SetAction set_action);

void register_eval(CLI::App& root, SetAction set_action) {
  CLI::App* eval = root.add_subcommand(
      "eval", "accuracy: KL divergence of a KV dtype (in process), gsm8k and MMLU (against a server)");
  eval->require_subcommand(1);
  register_eval_kld(*eval, set_action);
  register_eval_server(*eval, set_action);
}

}  // namespace serve8
