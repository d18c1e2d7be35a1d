#include "formats/gguf_dequant.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace serve8 {
namespace {

// The 6-bit scales and mins of the 8 sub-blocks of a Q4_K/Q5_K block, packed in 12 bytes.
void k_scale_min(const uint8_t* s, uint8_t (&sc)[8], uint8_t (&mn)[8]) {
  for (int k = 0; k < 4; ++k) {
    sc[k] = s[k] & 63;
    mn[k] = s[4 + k] & 63;
    sc[4 + k] = static_cast<uint8_t>((s[8 + k] & 0x0f) | ((s[k] >> 2) & 0x30));
    mn[4 + k] = static_cast<uint8_t>((s[8 + k] >> 4) | ((s[4 + k] >> 2) & 0x30));
  }
}

float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

}  // namespace

void dequantize_ggml(uint32_t type, const uint8_t* src, int64_t n, float* out) {
  (void)ggml_nbytes(type, n);  // throws for a type serve8 does not read or a partial block
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_at(src + 2 * i);
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case GgmlType::kQ8_0:  // f16 d, int8 q[32]: d * q
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = src + b * 34;
        const float d = f16_at(p);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * static_cast<float>(static_cast<int8_t>(p[2 + j]));
      }
      return;
    case GgmlType::kQ4_0:  // f16 d, u8 qs[16]: element j < 16 is the low nibble of qs[j], j >= 16 the high one
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = src + b * 18;
        const float d = f16_at(p);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>((p[2 + j] & 0x0f) - 8);
          out[b * 32 + j + 16] = d * static_cast<float>((p[2 + j] >> 4) - 8);
        }
      }
      return;
    case GgmlType::kQ4_K:  // f16 d, f16 dmin, scales[12], qs[128]; 8 sub-blocks of 32: d*sc*q - dmin*m
    case GgmlType::kQ5_K:  // ... and qh[32] before qs: bit j of qh[i] is the 5th bit in sub-block j
      for (int64_t b = 0; b < n / 256; ++b) {
        const bool five = static_cast<GgmlType>(type) == GgmlType::kQ5_K;
        const uint8_t* p = src + b * (five ? 176 : 144);
        const float d = f16_at(p), dmin = f16_at(p + 2);
        uint8_t sc[8], mn[8];
        k_scale_min(p + 4, sc, mn);
        const uint8_t* qh = p + 16;
        const uint8_t* qs = p + (five ? 48 : 16);
        for (int j = 0; j < 8; ++j) {  // qs group j / 2: low nibbles for even j, high for odd
          const float dj = d * static_cast<float>(sc[j]), mj = dmin * static_cast<float>(mn[j]);
          for (int i = 0; i < 32; ++i) {
            int q = (qs[(j / 2) * 32 + i] >> (4 * (j % 2))) & 0x0f;
            if (five) q |= ((qh[i] >> j) & 1) << 4;
            out[b * 256 + j * 32 + i] = dj * static_cast<float>(q) - mj;
          }
        }
      }
      return;
    case GgmlType::kQ6_K:  // ql[128], qh[64], int8 scales[16], f16 d; 16 sub-blocks of 16: d*sc*(q - 32)
      for (int64_t b = 0; b < n / 256; ++b) {
        const uint8_t* p = src + b * 210;
        const uint8_t *ql = p, *qh = p + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        const float d = f16_at(p + 208);
        for (int e = 0; e < 256; ++e) {
          const int half = e / 128, w = e % 128;  // each half: ql 64 bytes (two nibbles), qh 32 bytes (four pairs)
          const int lo = (ql[half * 64 + w % 64] >> (4 * (w / 64))) & 0x0f;
          const int hi = (qh[half * 32 + w % 32] >> (2 * (w / 32))) & 0x03;
          out[b * 256 + e] = d * static_cast<float>(sc[e / 16]) * static_cast<float>((lo | (hi << 4)) - 32);
        }
      }
      return;
    case GgmlType::kQ4_1:  // f16 d, f16 m, u8 qs[16]: d * q + m
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* p = src + b * 20;
        const float d = f16_at(p), m = f16_at(p + 2);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * static_cast<float>(p[4 + j] & 0x0f) + m;
          out[b * 32 + j + 16] = d * static_cast<float>(p[4 + j] >> 4) + m;
        }
      }
      return;
  }
}

std::vector<float> dequantize(const GgufFile& file, const GgufTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  dequantize_ggml(t.type, file.data(t), t.numel(), out.data());
  return out;
}

}  // namespace serve8
