// What a request's penalties, logit bias and min_new_tokens do to its next token's logits, as
// Backend::edit_logits takes them.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/request.h"

namespace serve8 {

// Records a sampled token in r's penalty state (a no-op for requests without penalties).
void note_sampled(Request& r, int32_t token);

// Appends the edits of request r, whose logits are row `row`; eos_ids are the model's.
void append_logit_edits(Request& r, int32_t row, const std::vector<int>& eos_ids, std::vector<LogitEdit>& out);

}  // namespace serve8
