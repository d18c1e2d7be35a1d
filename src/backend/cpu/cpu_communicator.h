// The CPU backend's communicator: N ranks on N threads of one process exchange pointers to their
// buffers through shared state and copy directly, with a barrier on each side of the copy. No
// buffer is allocated after the group is made (the sum's staging area is sized up front).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/communicator.h"

namespace serve8 {

// Communicators for ranks 0..n-1 of one group; all_reduce_sum takes up to max_reduce_elems
// elements per call.
std::vector<std::unique_ptr<Communicator>> make_in_process_communicators(int n, int64_t max_reduce_elems);

}  // namespace serve8
