// NCCL, opened at the first tensor-parallel group rather than when serve8 starts: one GPU never
// needs it, and PyPI's nvidia-nccl-cu13 may hold the only copy on a machine (put its lib/ on
// LD_LIBRARY_PATH).
#pragma once

#include <nccl.h>

namespace serve8 {

struct NcclApi {
  decltype(&ncclGetVersion) GetVersion;
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclCommInitAll) CommInitAll;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommAbort) CommAbort;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclAllGather) AllGather;
};

// The library's entry points, opened on the first call (libnccl.so.2 from the loader's path, else
// from the toolkit serve8 was built with). Throws Error naming what it tried when it cannot.
const NcclApi& nccl();

// Throws Error with NCCL's message when r is not ncclSuccess.
void nccl_check(ncclResult_t r, const char* what);

}  // namespace serve8
