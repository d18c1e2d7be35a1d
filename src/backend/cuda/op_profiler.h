// OpProfiler: device time per backend op, from CUDA events recorded around each op's launches on
// the backend's stream. Off by default (an op then pays one branch); bench-one-batch switches it
// on, with CUDA graphs off, to split a step's time by op. An op that finds the stream idle first
// holds it for a while, so that the ops' times are the device's and not the host's launches.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace serve8 {

class OpProfiler {
 public:
  OpProfiler() = default;
  ~OpProfiler();
  void attach(cudaStream_t stream) { stream_ = stream; }
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  bool on() const { return on_; }
  void set(bool on);  // clears the totals
  int begin(const char* op);
  void end(int record);
  std::vector<OpTime> totals();  // waits for the stream

 private:
  struct Record {
    const char* op;
    cudaEvent_t start, stop;
  };
  void fold();  // moves finished records into totals_, so the event pool stays bounded

  cudaStream_t stream_ = nullptr;
  bool on_ = false;
  std::vector<Record> records_;  // events are reused; used_ of them hold pending records
  size_t used_ = 0;
  std::map<std::string, OpTime> totals_;
};

// Times the ops issued in its lifetime under one name when profiling is on.
class OpScope {
 public:
  OpScope(OpProfiler& p, const char* op) : p_(p.on() ? &p : nullptr), record_(p_ ? p_->begin(op) : -1) {}
  ~OpScope() {
    if (p_) p_->end(record_);
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpProfiler* p_;
  int record_;
};

}  // namespace serve8
