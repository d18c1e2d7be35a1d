// Paths and scratch directories shared by the tokenizer tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace serve8::testing {

inline std::string llama2_tokenizer_dir() { return std::string(SERVE8_SHARED_DIR) + "/models/llama2-tokenizer"; }
inline std::string llama2_tokenizer_model() { return llama2_tokenizer_dir() + "/tokenizer.model"; }

// A fresh directory under the system temp folder, removed with everything in it at scope exit.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("serve8_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

  void write(const std::string& name, const std::string& contents) const { std::ofstream(path_ / name) << contents; }
  // Links the shared Llama-2 tokenizer.model in, so configs can be tried beside it without a copy.
  void link_llama2_model() const {
    std::filesystem::create_symlink(llama2_tokenizer_model(), path_ / "tokenizer.model");
  }

 private:
  std::filesystem::path path_;
};

}  // namespace serve8::testing
