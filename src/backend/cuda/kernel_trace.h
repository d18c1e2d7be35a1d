// KernelTrace: the kernels the device runs, CUDA graphs included, from CUPTI's activity records
// (libcupti, opened on first use). bench-one-batch uses it to split graph-mode decode steps by
// kernel, where CUDA events between ops would break the graph and each small op's overlap.
#pragma once

#include <vector>

#include "backend/backend.h"

namespace serve8 {

class KernelTrace {
 public:
  KernelTrace() = default;
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  void start();                    // throws, naming CUPTI's error, where tracing cannot start
  std::vector<KernelSpan> stop();  // flushes after the caller synchronized the device

 private:
  bool on_ = false;
};

}  // namespace serve8
