#include "backend/cuda/shared_library.h"

#include <dlfcn.h>

#include "core/error.h"

namespace serve8 {

SharedLibrary::SharedLibrary(std::string what, const std::string& soname, std::string_view hint)
    : what_(std::move(what)) {
  lib_ = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  const std::string in_toolkit = std::string(SERVE8_CUDA_LIBRARY_DIR) + "/" + soname;
  if (lib_ == nullptr) lib_ = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL);
  SERVE8_CHECK(lib_ != nullptr, "{}: cannot open {} (from the loader's path or {}): {}{}", what_, soname, in_toolkit,
               dlerror(), hint);
}

void* SharedLibrary::symbol(const char* name) const {
  void* fn = dlsym(lib_, name);
  SERVE8_CHECK(fn != nullptr, "{}: no symbol {} in the library ({})", what_, name, dlerror());
  return fn;
}

}  // namespace serve8
