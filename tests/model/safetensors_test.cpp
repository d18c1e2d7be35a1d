// formats/safetensors.h: round trips, header validation, dtype conversion and sharded directories.
#include "formats/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "model/test_files.h"

namespace serve8 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;
using testing::write_raw_safetensors;

TEST(Safetensors, RoundTripAllDtypes) {
  TempDir dir;
  const std::string path = dir.file("rt.safetensors");
  std::vector<float> a(6 * 5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i) - 3.0f;
  std::vector<uint16_t> b(7), h(3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(static_cast<float>(i) * 1.5f);
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(-static_cast<float>(i) / 3.0f);
  const float scalar = 42.0f;

  SafetensorsWriter w(path);
  w.add("a.weight", DType::kF32, {6, 5}, a.data());
  w.add("b", DType::kBF16, {7}, b.data());
  w.add("h", DType::kF16, {1, 3}, h.data());
  w.add("gen", DType::kF32, {4}, [](void* dst) {
    for (int i = 0; i < 4; ++i) static_cast<float*>(dst)[i] = static_cast<float>(i * i);
  });
  w.add("scalar", DType::kF32, {}, &scalar);
  w.add("empty", DType::kF32, {0, 3}, nullptr);
  w.set_metadata("who", "test");
  w.finish();
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // The data section starts 8-byte aligned.
  uint64_t header_len = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);

  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("who"), "test");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorsTensor& ta = f.tensor("a.weight");
  EXPECT_EQ(ta.dtype, "F32");
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{6, 5}));
  EXPECT_EQ(ta.shape_str(), "[6, 5]");
  EXPECT_EQ(f.read_f32("a.weight"), a);
  const std::vector<float> rb = f.read_f32("b");
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(rb[i], bf16_to_f32(b[i]));
  const std::vector<float> rh = f.read_f32("h");
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(rh[i], f16_to_f32(h[i]));
  EXPECT_EQ(f.read_f32("gen"), (std::vector<float>{0, 1, 4, 9}));
  EXPECT_EQ(f.read_f32("scalar"), std::vector<float>{42.0f});
  EXPECT_EQ(f.tensor("scalar").numel(), 1);
  EXPECT_EQ(f.tensor("empty").numel(), 0);

  // Partial reads with conversion.
  std::vector<uint16_t> part(4);
  f.read(ta, 10, 4, DType::kBF16, part.data());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(part[static_cast<size_t>(i)], f32_to_bf16(a[static_cast<size_t>(10 + i)]));
  std::string msg = error_of([&] { f.read(ta, 28, 4, DType::kF32, part.data()); });
  EXPECT_NE(msg.find("a.weight"), std::string::npos) << msg;
  msg = error_of([&] { f.tensor("nope"); });
  EXPECT_NE(msg.find("rt.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
}

TEST(Safetensors, ConvertElementsMatchesScalarConversions) {
  std::vector<float> src(200000);  // past the OpenMP threshold
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::sin(static_cast<float>(i)) * 1000.0f;
  std::vector<uint16_t> bf(src.size()), hf(src.size());
  convert_elements(src.data(), DType::kF32, bf.data(), DType::kBF16, src.size());
  convert_elements(src.data(), DType::kF32, hf.data(), DType::kF16, src.size());
  std::vector<float> back(src.size());
  convert_elements(bf.data(), DType::kBF16, back.data(), DType::kF32, src.size());
  std::vector<uint16_t> bf_to_h(src.size());
  convert_elements(bf.data(), DType::kBF16, bf_to_h.data(), DType::kF16, src.size());
  for (size_t i = 0; i < src.size(); i += 997) {
    EXPECT_EQ(bf[i], f32_to_bf16(src[i]));
    EXPECT_EQ(hf[i], f32_to_f16(src[i]));
    EXPECT_EQ(back[i], bf16_to_f32(bf[i]));
    EXPECT_EQ(bf_to_h[i], f32_to_f16(bf16_to_f32(bf[i])));
  }
  // Unaligned source, as tensors in a mapped file may be.
  std::vector<uint8_t> raw(4 * 3 + 1);
  std::memcpy(raw.data() + 1, src.data(), 12);
  float out[3];
  convert_elements(raw.data() + 1, DType::kF32, out, DType::kF32, 3);
  EXPECT_EQ(out[2], src[2]);
  convert_elements(raw.data() + 1, DType::kF32, out, DType::kF32, 0);
}

TEST(Safetensors, RejectsBrokenHeaders) {
  TempDir dir;
  const std::string tiny = dir.file("tiny.safetensors");
  std::ofstream(tiny, std::ios::binary) << "abc";
  std::string msg = error_of([&] { SafetensorsFile f(tiny); });
  EXPECT_NE(msg.find("tiny.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;

  // A header length past the end of the file.
  const std::string long_len = dir.file("len.safetensors");
  {
    std::ofstream out(long_len, std::ios::binary);
    const uint64_t len = 1000;
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << "{}";
  }
  msg = error_of([&] { SafetensorsFile f(long_len); });
  EXPECT_NE(msg.find("len.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("header length 1000"), std::string::npos) << msg;

  const std::string bad_json = dir.file("json.safetensors");
  write_raw_safetensors(bad_json, R"({"x": {"dtype": "F32", )", std::string(8, '\0'));
  msg = error_of([&] { SafetensorsFile f(bad_json); });
  EXPECT_NE(msg.find("json.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;

  const std::string past = dir.file("past.safetensors");
  write_raw_safetensors(past, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                        std::string(8, '\0'));
  msg = error_of([&] { SafetensorsFile f(past); });
  EXPECT_NE(msg.find("past.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the data section"), std::string::npos) << msg;

  const std::string mismatch = dir.file("size.safetensors");
  write_raw_safetensors(mismatch, R"({"w": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 8]}})",
                        std::string(8, '\0'));
  msg = error_of([&] { SafetensorsFile f(mismatch); });
  EXPECT_NE(msg.find("size.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'w' has 8 bytes"), std::string::npos) << msg;

  const std::string no_shape = dir.file("shape.safetensors");
  write_raw_safetensors(no_shape, R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                        std::string(4, '\0'));
  msg = error_of([&] { SafetensorsFile f(no_shape); });
  EXPECT_NE(msg.find("bad shape"), std::string::npos) << msg;
}

TEST(Safetensors, UnsupportedDtypeFailsOnlyWhenRead) {
  TempDir dir;
  const std::string path = dir.file("mixed.safetensors");
  write_raw_safetensors(path,
                        R"({"ids": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
                            "w": {"dtype": "F32", "shape": [1], "data_offsets": [16, 20]},
                            "odd": {"dtype": "Q4_K", "shape": [3], "data_offsets": [20, 23]}})",
                        std::string(16, '\0') + std::string("\0\0\x80\x3f", 4) + "xyz");
  SafetensorsFile f(path);
  EXPECT_EQ(f.read_f32("w"), std::vector<float>{1.0f});
  std::string msg = error_of([&] { f.read_f32("ids"); });
  EXPECT_NE(msg.find("mixed.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'ids' has dtype I64"), std::string::npos) << msg;
  msg = error_of([&] { f.read_f32("odd"); });
  EXPECT_NE(msg.find("Q4_K"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedFile) {
  TempDir dir;
  const std::string path = dir.file("cut.safetensors");
  std::vector<float> a(100, 1.0f), b(50, 2.0f);
  SafetensorsWriter w(path);
  w.add("first", DType::kF32, {100}, a.data());
  w.add("last", DType::kF32, {50}, b.data());
  w.finish();
  fs::resize_file(path, fs::file_size(path) - 10);
  const std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("cut.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tensor 'last'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(Safetensors, ShardedCheckpoint) {
  TempDir dir;
  std::vector<float> x(8, 1.0f), y(4, 2.0f), z(2, 3.0f);
  {
    SafetensorsWriter w(dir.file("model-00001-of-00002.safetensors"));
    w.add("x", DType::kF32, {2, 4}, x.data());
    w.add("y", DType::kF32, {4}, y.data());
    w.finish();
  }
  {
    SafetensorsWriter w(dir.file("model-00002-of-00002.safetensors"));
    w.add("z", DType::kBF16, {2}, [](void* dst) {
      static_cast<uint16_t*>(dst)[0] = f32_to_bf16(3.0f);
      static_cast<uint16_t*>(dst)[1] = f32_to_bf16(3.0f);
    });
    w.finish();
  }
  nlohmann::json index = {{"metadata", {{"total_size", 52}}},
                          {"weight_map",
                           {{"x", "model-00001-of-00002.safetensors"},
                            {"y", "model-00001-of-00002.safetensors"},
                            {"z", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir.file("model.safetensors.index.json")) << index.dump(2);

  SafetensorsCheckpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_TRUE(ckpt.contains("z"));
  EXPECT_NE(ckpt.file_of("z").path().find("00002"), std::string::npos);
  EXPECT_EQ(ckpt.file_of("z").read_f32("z"), z);
  EXPECT_EQ(ckpt.tensor("x").shape, (std::vector<int64_t>{2, 4}));
  const std::string msg = error_of([&] { ckpt.file_of("w"); });
  EXPECT_NE(msg.find("tensor 'w' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;

  // An index that points at a shard without the tensor, or at a missing shard.
  index["weight_map"]["q"] = "model-00002-of-00002.safetensors";
  std::ofstream(dir.file("model.safetensors.index.json"), std::ios::trunc) << index.dump(2);
  std::string bad = error_of([&] { SafetensorsCheckpoint c(dir.path()); });
  EXPECT_NE(bad.find("'q'"), std::string::npos) << bad;
  index["weight_map"].erase("q");
  index["weight_map"]["r"] = "model-00003-of-00002.safetensors";
  std::ofstream(dir.file("model.safetensors.index.json"), std::ios::trunc) << index.dump(2);
  bad = error_of([&] { SafetensorsCheckpoint c(dir.path()); });
  EXPECT_NE(bad.find("model-00003-of-00002.safetensors"), std::string::npos) << bad;

  // A single model.safetensors wins over an index, as in transformers.
  {
    SafetensorsWriter w(dir.file("model.safetensors"));
    w.add("only", DType::kF32, {1}, x.data());
    w.finish();
  }
  SafetensorsCheckpoint single(dir.path());
  EXPECT_EQ(single.names(), std::vector<std::string>{"only"});

  TempDir empty;
  bad = error_of([&] { SafetensorsCheckpoint c(empty.path()); });
  EXPECT_NE(bad.find("no model.safetensors"), std::string::npos) << bad;
}

// Corrupted files (random bytes changed, random truncation) must fail with serve8::Error or load
// fine, never crash or read out of bounds (run under the sanitizers to mean something).
TEST(Safetensors, CorruptedFilesFailCleanly) {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  std::vector<float> a(64, 0.5f);
  SafetensorsWriter w(good);
  w.add("model.embed_tokens.weight", DType::kF32, {8, 8}, a.data());
  w.add("model.norm.weight", DType::kBF16, {8}, [](void* dst) { std::memset(dst, 0, 16); });
  w.finish();
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  std::mt19937 rng(99);
  int failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string b = bytes;
    if (trial % 3 == 0) {
      b.resize(std::uniform_int_distribution<size_t>(0, b.size() - 1)(rng));
    } else {
      const int flips = 1 + trial % 4;
      for (int i = 0; i < flips; ++i) {
        const size_t at = std::uniform_int_distribution<size_t>(0, 8 + header_len - 1)(rng);
        b[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
      }
    }
    const std::string path = dir.file("bad.safetensors");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
    try {
      SafetensorsFile f(path);
      for (const SafetensorsTensor& t : f.tensors()) {
        std::vector<float> out(static_cast<size_t>(t.numel()));
        if (safetensors_dtype(t.dtype) && t.numel() < (1 << 20)) f.read(t, 0, t.numel(), DType::kF32, out.data());
      }
    } catch (const Error& e) {
      ++failures;
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(failures, 100);
}

TEST(Safetensors, WriterRejectsDuplicatesAndE5m2) {
  TempDir dir;
  float v = 1.0f;
  SafetensorsWriter w(dir.file("w.safetensors"));
  w.add("a", DType::kF32, {1}, &v);
  EXPECT_THROW(w.add("a", DType::kF32, {1}, &v), Error);
  EXPECT_THROW(w.add("b", DType::kFP8E5M2, {1}, &v), Error);  // FP8 checkpoints store e4m3
}

// FP8 checkpoints (`serve8 convert fp8`): e4m3 codes are written as F8_E4M3 and read back as stored.
TEST(Safetensors, WriterStoresE4m3Codes) {
  TempDir dir;
  const uint8_t codes[6] = {0x00, 0x38, 0xc8, 0x7e, 0x01, 0x80};  // 0, 1, -4, 448, the least, -0
  SafetensorsWriter w(dir.file("w.safetensors"));
  w.add("q", DType::kFP8E4M3, {2, 3}, codes);
  w.finish();
  const SafetensorsFile f(dir.file("w.safetensors"));
  const SafetensorsTensor& t = f.tensor("q");
  EXPECT_EQ(f.dtype(t), DType::kFP8E4M3);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(0, std::memcmp(f.raw(t), codes, sizeof codes));
}

}  // namespace
}  // namespace serve8
