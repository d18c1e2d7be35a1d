#include "core/tensor.h"

#include "core/error.h"

namespace serve8 {

Tensor::Tensor(void* d, DType t, std::initializer_list<int64_t> dims) : data(d), dtype(t) {
  SERVE8_CHECK(dims.size() <= kMaxDims, "tensor with {} dims (at most {})", dims.size(), kMaxDims);
  for (int64_t x : dims) shape[static_cast<size_t>(ndim++)] = x;
}

int64_t Tensor::numel() const {
  if (ndim == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

Tensor Tensor::rows(int64_t begin, int64_t count) const {
  SERVE8_CHECK(ndim >= 1 && begin >= 0 && begin + count <= shape[0], "rows [{}, {}) out of tensor {}", begin,
               begin + count, shape_str());
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin * row_size()) * dtype_size(dtype);
  t.shape[0] = count;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  Tensor t(data, dtype, dims);
  SERVE8_CHECK(t.numel() == numel(), "cannot reshape {} to {}", shape_str(), t.shape_str());
  return t;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[static_cast<size_t>(i)]);
  return s + "]";
}

}  // namespace serve8
