// Helpers for the backend op tests: seeded random data, host tensors and copies to and from a
// backend's memory. The CPU backend's memory is host memory, so its tests may wrap std::vectors.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace serve8::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float normal(float stddev = 1.0f) { return std::normal_distribution<float>(0.0f, stddev)(gen_); }
  int32_t integer(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(gen_); }
  std::vector<float> normals(size_t n, float stddev = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(stddev);
    return v;
  }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// Element storage for one dtype, filled from fp32 values (rounded as core/dtype.h rounds).
struct HostArray {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;

  HostArray(DType t, const std::vector<float>& values) : dtype(t), bytes(values.size() * dtype_size(t)) {
    for (size_t i = 0; i < values.size(); ++i) set(i, values[i]);
  }
  HostArray(DType t, size_t n) : dtype(t), bytes(n * dtype_size(t)) {}

  void set(size_t i, float x) {
    switch (dtype) {
      case DType::kF32:
        reinterpret_cast<float*>(bytes.data())[i] = x;
        return;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_bf16(x);
        return;
      case DType::kF16:
        reinterpret_cast<uint16_t*>(bytes.data())[i] = f32_to_f16(x);
        return;
      case DType::kFP8E5M2:
        bytes[i] = f32_to_e5m2(x);
        return;
      case DType::kFP8E4M3:
        bytes[i] = f32_to_e4m3(x);
        return;
      case DType::kI32:
      case DType::kI8:
      case DType::kI4:
        reinterpret_cast<int32_t*>(bytes.data())[i] = static_cast<int32_t>(x);
        return;
    }
  }
  float get(size_t i) const { return decode(dtype, bytes.data() + i * dtype_size(dtype)); }
  size_t size() const { return bytes.size() / dtype_size(dtype); }
  std::vector<float> values() const {
    std::vector<float> v(size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = get(i);
    return v;
  }
  Tensor view(std::initializer_list<int64_t> dims) { return Tensor(bytes.data(), dtype, dims); }

  static float decode(DType t, const uint8_t* p) {
    uint16_t h;
    switch (t) {
      case DType::kF32: {
        float f;
        std::memcpy(&f, p, 4);
        return f;
      }
      case DType::kBF16:
        std::memcpy(&h, p, 2);
        return bf16_to_f32(h);
      case DType::kF16:
        std::memcpy(&h, p, 2);
        return f16_to_f32(h);
      case DType::kFP8E5M2:
        return e5m2_to_f32(*p);
      case DType::kFP8E4M3:
        return e4m3_to_f32(*p);
      case DType::kI8:
        return static_cast<float>(static_cast<int>(*p) - 128);  // stored offset by 128; before its row's scale
      case DType::kI4:
        return static_cast<float>(*p);  // a byte of two codes: the attention tests decode int4 themselves
      case DType::kI32: {
        int32_t i;
        std::memcpy(&i, p, 4);
        return static_cast<float>(i);
      }
    }
    return 0.0f;
  }
};

// Each of t tokens' q, k and v rows side by side (q, k and v hold t rows each): one QKV GEMM's
// output, as rope_kv_store takes it.
inline HostArray qkv_rows(const HostArray& q, const HostArray& k, const HostArray& v, int64_t t) {
  HostArray out(q.dtype, q.size() + k.size() + v.size());
  const size_t tokens = static_cast<size_t>(t);
  uint8_t* dst = out.bytes.data();
  for (size_t i = 0; i < tokens; ++i)
    for (const HostArray* x : {&q, &k, &v}) {
      const size_t row = x->bytes.size() / tokens;
      std::memcpy(dst, x->bytes.data() + i * row, row);
      dst += row;
    }
  return out;
}

// Elements [begin, begin + n) of each of t equal rows of x.
inline HostArray row_slices(const HostArray& x, int64_t t, int64_t begin, int64_t n) {
  HostArray out(x.dtype, static_cast<size_t>(t * n));
  const size_t es = dtype_size(x.dtype), row = x.bytes.size() / static_cast<size_t>(t);
  for (size_t i = 0; i < static_cast<size_t>(t); ++i)
    std::memcpy(out.bytes.data() + i * static_cast<size_t>(n) * es,
                x.bytes.data() + i * row + static_cast<size_t>(begin) * es, static_cast<size_t>(n) * es);
  return out;
}

inline Tensor view_of(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kF32, dims);
}
inline Tensor view_of(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return Tensor(v.data(), DType::kI32, dims);
}

// An array of one dtype in a backend's memory (host memory for the CPU backend), owning it.
struct DeviceArray {
  Buffer buf;
  DType dtype = DType::kF32;
  size_t n = 0;
  Tensor view(std::initializer_list<int64_t> dims) const { return Tensor(buf.data(), dtype, dims); }
};

inline DeviceArray to_device(Backend& be, const HostArray& h) {
  DeviceArray d{Buffer(be, h.bytes.size()), h.dtype, h.size()};
  be.copy_to_device(d.buf.data(), h.bytes.data(), h.bytes.size());
  return d;
}

inline DeviceArray to_device(Backend& be, const std::vector<int32_t>& v) {
  DeviceArray d{Buffer(be, v.size() * 4), DType::kI32, v.size()};
  be.copy_to_device(d.buf.data(), v.data(), v.size() * 4);
  return d;
}

inline HostArray to_host(Backend& be, const void* data, DType t, size_t n) {
  HostArray h(t, n);
  be.copy_to_host(h.bytes.data(), data, h.bytes.size());
  return h;
}

inline HostArray to_host(Backend& be, const DeviceArray& d) { return to_host(be, d.buf.data(), d.dtype, d.n); }

// A sampling row with every filter given.
inline SamplingRow sampling_row(float temperature, float top_p, int top_k, float min_p, uint64_t seed, uint64_t step) {
  SamplingRow r;
  r.temperature = temperature;
  r.top_p = top_p;
  r.top_k = top_k;
  r.min_p = min_p;
  r.seed = seed;
  r.step = step;
  return r;
}

}  // namespace serve8::test
