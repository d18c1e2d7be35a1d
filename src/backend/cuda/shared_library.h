// A CUDA library opened at first use (cuBLASLt, NCCL), so that serve8 starts on machines without
// it and names what is missing instead of failing to load.
#pragma once

#include <string>
#include <string_view>

namespace serve8 {

class SharedLibrary {
 public:
  // Opens `soname` from the loader's path, else from the CUDA toolkit's library directory; the
  // library stays open for the process's life. `what` names it in errors, `hint` ends them.
  SharedLibrary(std::string what, const std::string& soname, std::string_view hint = {});

  // fn = the library's `name`; throws serve8::Error naming both when it is missing.
  template <typename F>
  void bind(const char* name, F& fn) const {
    fn = reinterpret_cast<F>(symbol(name));
  }

 private:
  void* symbol(const char* name) const;
  std::string what_;
  void* lib_ = nullptr;
};

}  // namespace serve8
