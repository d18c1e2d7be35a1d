// Attention cases for an independent oracle (scripts/torch_attention_check.py): when
// SERVE8_ATTENTION_DUMP_DIR is set, the attention tests write each case's inputs and the backend's
// output there as raw little-endian .bin files, listed in one manifest.json. Unset, nothing happens.
#pragma once

#include <string>

#include "backend/backend.h"

namespace serve8::test {

// Writes case `name` (replacing an earlier case of that name in the manifest): q and out
// [T, Hq, D] as `be` holds them, the layer's K/V pools as stored [slots, Hkv, D] with their
// scales, the batch's qo_indptr, kv_indptr and kv_indices (as the backend made them from its
// request table), and the softmax scale. Pools equal to
// one already written are not written again. Does nothing when SERVE8_ATTENTION_DUMP_DIR is unset.
void dump_attention_case(Backend& be, const std::string& name, const Tensor& q, const KvLayer& kv,
                         const DeviceBatch& batch, float softmax_scale, const Tensor& out);

}  // namespace serve8::test
