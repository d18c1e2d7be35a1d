// Scalar number formats of serve8 and their conversions to and from fp32.
//
// One header for host and device code, so that the CPU reference, the CUDA kernels and the tests
// agree bit for bit. Conversions from fp32 round to nearest, ties to even. The FP8 formats (OCP:
// E5M2, and E4M3 "fn" with no infinities) saturate: anything past the largest finite value,
// infinities included, becomes that value with its sign; NaN stays NaN. bf16 and fp16 follow IEEE
// and overflow to infinity.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__CUDACC__)
#define SERVE8_HD __host__ __device__ __forceinline__
#else
#define SERVE8_HD inline
#endif

namespace serve8 {

// kI8: a KV storage format only, symmetric int8 codes (-127..127) with a scale per (token, KV head)
// beside the pool, each stored offset by 128 (its top bit flipped): kernels then place the byte under
// fp16's exponent as it is.
// kI4: a KV storage format only, two 4-bit codes a byte with a scale and minimum per (token, KV
// head) beside the pool; a kI4 tensor's shape counts bytes (head_dim / 2 in its last dimension).
enum class DType : uint8_t { kF32, kBF16, kF16, kFP8E5M2, kFP8E4M3, kI32, kI8, kI4 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kFP8E5M2:
      return 1;
    case DType::kFP8E4M3:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI8:
    case DType::kI4:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "fp32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "fp16";
    case DType::kFP8E5M2:
      return "fp8_e5m2";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
    case DType::kI32:
      return "int32";
    case DType::kI8:
      return "int8";
    case DType::kI4:
      return "int4";
  }
  return "?";
}

constexpr bool dtype_is_fp8(DType t) { return t == DType::kFP8E5M2 || t == DType::kFP8E4M3; }

// Parses the names users type: fp32/float32, bf16/bfloat16, fp16/float16/half, fp8_e5m2, fp8_e4m3
// (also e4m3fn spellings), int8 and int4 (KV only). Throws serve8::Error for anything else.
DType parse_dtype(std::string_view name);

SERVE8_HD uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

SERVE8_HD float bits_to_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

namespace detail {

// Rounds the 24-bit significand `m` (implicit bit included) right by `shift` bits, ties to even.
SERVE8_HD uint32_t round_shift_rne(uint32_t m, int shift) {
  if (shift <= 0) return m << -shift;
  if (shift >= 32) return 0;
  const uint32_t half_minus_one = (1u << (shift - 1)) - 1u;
  return (m + half_minus_one + ((m >> shift) & 1u)) >> shift;
}

// A binary format with kExp exponent bits, kMan mantissa bits and the IEEE bias. kFn: E4M3 "fn"
// (no infinities, the all-ones code is NaN, saturating); otherwise IEEE-like, and kSaturate says
// whether overflow clamps to the largest finite value or becomes infinity.
template <int kExp, int kMan, bool kFn, bool kSaturate>
struct SmallFloat {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr int kEmin = 1 - kBias;  // exponent of the smallest normal
  static constexpr uint32_t kSignBit = 1u << (kExp + kMan);
  static constexpr uint32_t kExpAllOnes = (1u << kExp) - 1u;
  // Largest finite code, without sign.
  static constexpr uint32_t kMaxCode =
      kFn ? ((kExpAllOnes << kMan) | ((1u << kMan) - 2u)) : (((kExpAllOnes - 1u) << kMan) | ((1u << kMan) - 1u));
  static constexpr uint32_t kInfCode = kExpAllOnes << kMan;
  static constexpr uint32_t kNanCode =
      kFn ? ((kExpAllOnes << kMan) | ((1u << kMan) - 1u)) : ((kExpAllOnes << kMan) | (1u << (kMan - 1)));

  SERVE8_HD static uint32_t encode(float x) {
    const uint32_t u = f32_to_bits(x);
    const uint32_t sign = (u >> 31) ? kSignBit : 0u;
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | kNanCode;
    const int e = static_cast<int>(a >> 23) - 127;
    uint32_t code;
    if (e >= kEmin) {
      // Normal in the target: round the fp32 bits themselves, a carry moves into the exponent.
      const int shift = 23 - kMan;
      const uint32_t r = round_shift_rne(a, shift);
      code = r - (static_cast<uint32_t>(127 - kBias) << kMan);
    } else {
      if ((a >> 23) == 0) return sign;  // fp32 subnormals are far below every target subnormal
      const uint32_t m = (a & 0x7fffffu) | 0x800000u;
      const int shift = (23 - kMan) + (kEmin - e);
      code = round_shift_rne(m, shift);  // may round up into the smallest normal: same encoding
    }
    if (a >= 0x7f800000u || code > kMaxCode) return sign | (kSaturate ? kMaxCode : kInfCode);
    return sign | code;
  }

  SERVE8_HD static float decode(uint32_t c) {
    const uint32_t sign = (c & kSignBit) ? 0x80000000u : 0u;
    const uint32_t ex = (c >> kMan) & kExpAllOnes;
    const uint32_t man = c & ((1u << kMan) - 1u);
    if (kFn) {
      if (ex == kExpAllOnes && man == (1u << kMan) - 1u) return bits_to_f32(sign | 0x7fc00000u);
    } else if (ex == kExpAllOnes) {
      return bits_to_f32(sign | (man ? 0x7fc00000u : 0x7f800000u));
    }
    if (ex == 0) {
      // Subnormal: man * 2^(kEmin - kMan), exact in fp32.
      const float scale = bits_to_f32(static_cast<uint32_t>(127 + kEmin - kMan) << 23);
      const float v = static_cast<float>(man) * scale;
      return bits_to_f32(sign | f32_to_bits(v));
    }
    return bits_to_f32(sign | ((ex - kBias + 127) << 23) | (man << (23 - kMan)));
  }
};

using E5M2 = SmallFloat<5, 2, false, true>;
using E4M3 = SmallFloat<4, 3, true, true>;
using F16 = SmallFloat<5, 10, false, false>;

}  // namespace detail

// bf16 is fp32's upper half: round the lower half away, ties to even; NaN stays a quiet NaN.
SERVE8_HD uint16_t f32_to_bf16(float x) {
  const uint32_t u = f32_to_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
SERVE8_HD float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

SERVE8_HD uint16_t f32_to_f16(float x) { return static_cast<uint16_t>(detail::F16::encode(x)); }
SERVE8_HD float f16_to_f32(uint16_t h) { return detail::F16::decode(h); }

SERVE8_HD uint8_t f32_to_e5m2(float x) { return static_cast<uint8_t>(detail::E5M2::encode(x)); }
SERVE8_HD float e5m2_to_f32(uint8_t c) { return detail::E5M2::decode(c); }

SERVE8_HD uint8_t f32_to_e4m3(float x) { return static_cast<uint8_t>(detail::E4M3::encode(x)); }
SERVE8_HD float e4m3_to_f32(uint8_t c) { return detail::E4M3::decode(c); }

constexpr float kE5M2Max = 57344.0f;
constexpr float kE4M3Max = 448.0f;
constexpr float kF16Max = 65504.0f;

}  // namespace serve8
