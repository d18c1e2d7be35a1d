#include "backend/cuda/nccl_api.h"

#include <string>

#include "backend/cuda/shared_library.h"
#include "core/error.h"

namespace serve8 {

namespace {

NcclApi open_nccl() {
  const SharedLibrary lib("NCCL", "libnccl.so." + std::to_string(NCCL_MAJOR),
                          "; PyPI's nvidia-nccl-cu13 has it in nvidia/nccl/lib (add that to LD_LIBRARY_PATH)");
  NcclApi api{};
  lib.bind("ncclGetVersion", api.GetVersion);
  lib.bind("ncclGetErrorString", api.GetErrorString);
  lib.bind("ncclCommInitAll", api.CommInitAll);
  lib.bind("ncclCommDestroy", api.CommDestroy);
  lib.bind("ncclCommAbort", api.CommAbort);
  lib.bind("ncclAllReduce", api.AllReduce);
  lib.bind("ncclAllGather", api.AllGather);
  return api;
}

}  // namespace

const NcclApi& nccl() {
  static const NcclApi api = open_nccl();
  return api;
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL: {} failed: {}", what, nccl().GetErrorString(r));
}

}  // namespace serve8
