// Steps built by hand for the tools that drive a model without the scheduler (bench-one-batch,
// dump-logits, calibrate, eval kld), as SGLang's bench_one_batch does: a fixed set of sequences,
// sequence i on row i of the request -> slot table, owning the slots from first_slot[i] on, one
// slot per position. The scheduler cannot serve them: they need every row in the same step at a
// chosen length (a static batch), where the scheduler admits, chunks and finishes on its own.
// Each step sends only its new slots, as the scheduler's do.
#pragma once

#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/llama.h"

namespace serve8 {

// Slot ranges of `n` sequences of up to `capacity` tokens each after the reserved slot 0; throws
// when the pool or the request table is too small.
std::vector<int32_t> first_slots(int n, int capacity, const KvCache& kv);

// Appends a row that adds `tokens` to the sequence on table row `row`, which already has `start`
// tokens in the pool.
void append_row(ForwardBatch& b, int32_t row, int32_t first_slot, int start, std::span<const int32_t> tokens);

// Runs the prompts through the model in steps of at most `budget` tokens and `max_rows` rows
// (long prompts are chunked). With want_logits, returns the fp32 logits of each prompt's last
// token, [prompts][vocab]; else an empty vector.
std::vector<std::vector<float>> prefill(LlamaModel& model, KvCache& kv,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<int32_t>& first_slot, int budget, int max_rows,
                                        bool want_logits);

// One decode step: sequence i (of tokens.size()) adds tokens[i] at position positions[i]. Returns
// the logits [n, vocab] in backend memory, valid until the next step.
Tensor decode_step(LlamaModel& model, KvCache& kv, ForwardBatch& scratch, const std::vector<int32_t>& tokens,
                   const std::vector<int32_t>& positions, const std::vector<int32_t>& first_slot);

}  // namespace serve8
