// Helpers shared by the model tests: scratch directories, hand-made safetensors files, and
// catching serve8::Error messages.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace serve8::testing {

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("serve8-model-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Writes a safetensors file from a header text and data bytes exactly as given, to build the
// broken files a writer would refuse to make.
inline void write_raw_safetensors(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header << data;
}

// Runs f and returns the message of the serve8::Error it throws; a test failure if it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a serve8::Error";
  return "";
}

}  // namespace serve8::testing
