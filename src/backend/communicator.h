// Communicator: the collectives of tensor parallelism (DESIGN.md, "Tensor parallelism"), one
// object per rank. Every rank of a group calls the same collectives in the same order; a call
// returns once this rank's output is complete. The CPU's is in process (cpu/cpu_communicator.h)
// or across processes (gloo/gloo_communicator.h); the CUDA one wraps NCCL
// (cuda/nccl_communicator.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace serve8 {

class Backend;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The backend this rank's model runs on, given once before any collective: a device's
  // collectives (NCCL) join its stream, so they order with its ops and CUDA graphs capture them.
  virtual void bind(Backend& backend) { (void)backend; }
  // x (the compute dtype; any shape, the same element count on every rank) becomes, in place, the
  // elementwise sum over the ranks' x, the same bits on every rank (the CPU's add in rank order).
  virtual void all_reduce_sum(Tensor x) = 0;
  // in [R, C_r] (C_r may differ between ranks), out [R, sum of C_r]: rank r's columns land at
  // offset C_0 + ... + C_{r-1} of every row of every rank's out. Any dtype, the same on all ranks.
  virtual void all_gather(const Tensor& in, Tensor out) = 0;
  // Breaks the group: peers blocked in (or later entering) a collective throw instead of waiting
  // for this rank forever. A rank whose step failed calls it before rethrowing.
  virtual void abort() = 0;
  // Rank 0's data reaches every rank (resized to fit): how ranks in other processes get their
  // steps. Groups of one process share their steps in memory and refuse it.
  virtual void broadcast(std::vector<int32_t>& data);
};

}  // namespace serve8
