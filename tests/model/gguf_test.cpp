// The GGUF reader against the gguf package (llama.cpp's Python reader/writer): metadata, shapes
// and dequantized values of tests/golden/tiny.gguf (tests/golden/gen_gguf_golden.py), and clear
// errors for malformed files.
#include "formats/gguf_dequant.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_files.h"

namespace serve8 {
namespace {

using testing::error_of;
using testing::TempDir;

const std::string kGolden = std::string(SERVE8_SOURCE_DIR) + "/tests/golden/tiny.gguf";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Gguf, MetadataOfTheGolden) {
  const GgufFile f(kGolden);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 2);
  EXPECT_EQ(f.get_int("llama.context_length"), 128);
  EXPECT_DOUBLE_EQ(f.get_float("tiny.scale"), 0.125);
  EXPECT_TRUE(f.metadata().at("tiny.flag").b);
  const auto& words = f.get_array("tiny.words");
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[1].s, "bé");
  EXPECT_NE(error_of([&] { f.get_int("general.architecture"); }).find("not an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { f.get_string("nope"); }).find("'nope' is missing"), std::string::npos);
}

TEST(Gguf, DequantizedValuesEqualTheGgufPackage) {
  const GgufFile f(kGolden);
  std::ifstream in(std::string(SERVE8_SOURCE_DIR) + "/tests/golden/tiny_gguf_expected.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_EQ(f.tensors().size(), expected.size());
  for (const auto& [name, e] : expected.items()) {
    const GgufTensor& t = f.tensor(name);
    EXPECT_EQ(t.type, e["type"].get<uint32_t>()) << name;
    const auto shape = e["shape"].get<std::vector<int64_t>>();
    std::ostringstream want_shape;
    want_shape << "[" << shape[0] << ", " << shape[1] << "]";
    EXPECT_EQ(t.shape_str(), want_shape.str()) << name;
    const std::vector<float> got = dequantize(f, t);
    const auto want = e["values"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << name << " [" << i << "]";
  }
}

TEST(Gguf, MalformedFilesAreClearErrors) {
  TempDir dir;
  const std::string bytes = read_all(kGolden);
  auto write = [&](const std::string& name, const std::string& content) {
    std::ofstream(dir.file(name), std::ios::binary) << content;
    return dir.file(name);
  };
  std::string bad = bytes;
  bad[0] = 'X';
  EXPECT_NE(error_of([&] { GgufFile g(write("magic.gguf", bad)); }).find("bad magic"), std::string::npos);
  EXPECT_NE(error_of([&] { GgufFile g(write("trunc.gguf", bytes.substr(0, 100))); }).find("truncated"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { GgufFile g(write("short.gguf", bytes.substr(0, bytes.size() - 40))); }).find("runs past the end"),
      std::string::npos);
  // A hand-made file with one tensor of type 20 (IQ4_NL), which serve8 does not dequantize.
  std::string h = "GGUF";
  auto u32 = [&](uint32_t v) { h.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { h.append(reinterpret_cast<const char*>(&v), 8); };
  u32(3);
  u64(1);
  u64(0);
  u64(1);
  h += "w";
  u32(1);
  u64(256);
  u32(20);
  u64(0);
  h.resize(64 + 144, '\0');
  const std::string msg = error_of([&] { GgufFile g(write("q4k.gguf", h)); });
  EXPECT_NE(msg.find("tensor 'w' has type 20"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q4k.gguf"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { GgufFile g(dir.file("missing.gguf")); }).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace serve8
