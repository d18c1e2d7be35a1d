// Number-format conversions against the ml_dtypes golden table (tests/golden/gen_dtype_golden.py).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace serve8 {
namespace {

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream f(std::string(SERVE8_SOURCE_DIR) + "/tests/golden/dtype_golden.json");
    return nlohmann::json::parse(f);
  }();
  return j;
}

float input_of(const nlohmann::json& row) {
  return row["x"].is_string() ? std::nanf("") : bits_to_f32(row["x"].get<uint32_t>());
}

template <typename Decode>
void check_decode_all_codes(const char* name, Decode decode) {
  const auto& table = golden()["decode"][name];
  ASSERT_EQ(table.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const float got = decode(static_cast<uint8_t>(c));
    if (table[c].is_string()) {
      EXPECT_TRUE(std::isnan(got)) << name << " code " << c;
    } else {
      EXPECT_EQ(f32_to_bits(got), table[c].get<uint32_t>()) << name << " code " << c;
    }
  }
}

TEST(DType, DecodesEveryE5M2Code) { check_decode_all_codes("e5m2", e5m2_to_f32); }
TEST(DType, DecodesEveryE4M3Code) { check_decode_all_codes("e4m3", e4m3_to_f32); }

// Encoding each code's exact value gives the code back (NaN aside): the round trip is the identity.
TEST(DType, EveryFp8CodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    const float v5 = e5m2_to_f32(static_cast<uint8_t>(c));
    if (!std::isnan(v5) && !std::isinf(v5)) {
      EXPECT_EQ(f32_to_e5m2(v5), c);
    }
    const float v4 = e4m3_to_f32(static_cast<uint8_t>(c));
    if (!std::isnan(v4)) {
      EXPECT_EQ(f32_to_e4m3(v4), c);
    }
  }
}

template <typename Encode>
void check_encode(const char* name, Encode encode, bool nan_check) {
  int checked = 0;
  for (const auto& row : golden()["encode"]) {
    const float x = input_of(row);
    const auto& want = row[name];
    const auto got = encode(x);
    if (want.is_string()) {
      EXPECT_TRUE(nan_check) << name;
      ++checked;
      continue;
    }
    EXPECT_EQ(static_cast<uint32_t>(got), want.get<uint32_t>())
        << name << " of " << x << " (bits 0x" << std::hex << f32_to_bits(x) << ")";
    ++checked;
  }
  EXPECT_GT(checked, 5000);
}

TEST(DType, EncodesE5M2LikeMlDtypes) { check_encode("e5m2", f32_to_e5m2, true); }
TEST(DType, EncodesE4M3LikeMlDtypes) { check_encode("e4m3", f32_to_e4m3, true); }
TEST(DType, EncodesBf16LikeMlDtypes) { check_encode("bf16", f32_to_bf16, true); }
TEST(DType, EncodesFp16LikeNumpy) { check_encode("fp16", f32_to_f16, true); }

TEST(DType, NanStaysNan) {
  const float nan = std::nanf("");
  EXPECT_TRUE(std::isnan(e5m2_to_f32(f32_to_e5m2(nan))));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(nan))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(nan))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(nan))));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(f32_to_e4m3(-nan))));
}

TEST(DType, Fp8SaturatesOverflowAndInfinity) {
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(1e6f)), kE4M3Max);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(-INFINITY)), -kE4M3Max);
  EXPECT_EQ(e5m2_to_f32(f32_to_e5m2(INFINITY)), kE5M2Max);
  EXPECT_EQ(e5m2_to_f32(f32_to_e5m2(-7e4f)), -kE5M2Max);
  // fp16 follows IEEE: overflow is infinity.
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(7e4f))));
}

TEST(DType, ParsesNamesUsersType) {
  EXPECT_EQ(parse_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("float16"), DType::kF16);
  EXPECT_EQ(parse_dtype("fp8_e5m2"), DType::kFP8E5M2);
  EXPECT_EQ(parse_dtype("fp8_e4m3"), DType::kFP8E4M3);
  EXPECT_EQ(parse_dtype("float8_e4m3fn"), DType::kFP8E4M3);
  EXPECT_EQ(parse_dtype("int8"), DType::kI8);
  EXPECT_EQ(parse_dtype("int4"), DType::kI4);
  EXPECT_THROW(parse_dtype("int2"), Error);
  EXPECT_THROW(parse_dtype("fp4"), Error);
}

}  // namespace
}  // namespace serve8
