// Tensor: a non-owning view of a dense row-major array in host or device memory.
//
// Who allocates and frees the memory is the backend's business (backend/backend.h); a view only
// says where the elements are and how they are laid out.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace serve8 {

constexpr int kMaxDims = 4;

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};

  Tensor() = default;
  Tensor(void* d, DType t, std::initializer_list<int64_t> dims);

  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  // Elements per leading index: everything but dim 0.
  int64_t row_size() const { return ndim == 0 ? 0 : numel() / shape[0]; }
  bool empty() const { return data == nullptr; }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // A view of rows [begin, begin + count) along dim 0.
  Tensor rows(int64_t begin, int64_t count) const;
  // The same bytes seen with another shape of equal element count.
  Tensor reshape(std::initializer_list<int64_t> dims) const;
  std::string shape_str() const;  // "[32000, 4096]"
};

}  // namespace serve8
