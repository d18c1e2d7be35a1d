#include "backend/cuda/nccl_api.h"

#include <dlfcn.h>

#include <string>

#include "core/error.h"

namespace serve8 {

namespace {

template <typename F>
void bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  SERVE8_CHECK(fn != nullptr, "NCCL: no symbol {} in the library ({})", name, dlerror());
}

NcclApi open_nccl() {
  const std::string soname = "libnccl.so." + std::to_string(NCCL_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  const std::string in_toolkit = std::string(SERVE8_CUDA_LIBRARY_DIR) + "/" + soname;
  if (lib == nullptr) lib = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
  SERVE8_CHECK(lib != nullptr,
               "NCCL: cannot open {} (from the loader's path or {}): {}; PyPI's nvidia-nccl-cu13 has it in "
               "nvidia/nccl/lib (add that to LD_LIBRARY_PATH)",
               soname, in_toolkit, dlerror());
  NcclApi api{};
  bind(lib, "ncclGetVersion", api.GetVersion);
  bind(lib, "ncclGetErrorString", api.GetErrorString);
  bind(lib, "ncclCommInitAll", api.CommInitAll);
  bind(lib, "ncclCommDestroy", api.CommDestroy);
  bind(lib, "ncclCommAbort", api.CommAbort);
  bind(lib, "ncclAllReduce", api.AllReduce);
  bind(lib, "ncclAllGather", api.AllGather);
  return api;  // the library stays open for the process's life
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
