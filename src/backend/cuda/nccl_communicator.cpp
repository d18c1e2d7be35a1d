#include "backend/cuda/nccl_communicator.h"

#include <cuda_runtime.h>

#include <numeric>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_api.h"
#include "core/error.h"
#include "core/log.h"

namespace serve8 {

namespace {

ncclDataType_t nccl_dtype(DType t, const char* op) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    default:
      fail("{}: NCCL sums fp32, bf16, fp16 and int32, not {}", op, dtype_name(t));
  }
}

// Sets the calling thread's device for a scope and puts the previous one back.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    SERVE8_CUDA_CHECK(cudaGetDevice(&previous_));
    SERVE8_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {
    const DeviceScope on(rank_);
    SERVE8_CUDA_CHECK(cudaMalloc(&widths_, sizeof(int64_t) * static_cast<size_t>(size_)));
  }
  ~NcclCommunicator() override {
    const DeviceScope on(rank_);
    if (comm_) nccl().CommDestroy(comm_);
    cudaFree(widths_);
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void bind(Backend& backend) override {
    auto* cuda = dynamic_cast<CudaBackend*>(&backend);
    SERVE8_CHECK(cuda != nullptr, "NCCL: rank {} runs on the {} backend, not cuda", rank_, backend.name());
    SERVE8_CHECK(cuda->device() == rank_, "NCCL: rank {} belongs on GPU {}, but its backend is on GPU {}", rank_, rank_,
                 cuda->device());
    backend_ = cuda;
  }

  void all_reduce_sum(Tensor x) override {
    const cudaStream_t s = stream("all_reduce_sum");
    SERVE8_CHECK(x.data || x.numel() == 0, "all_reduce_sum: x has no data");
    nccl_check(nccl().AllReduce(x.data, x.data, static_cast<size_t>(x.numel()), nccl_dtype(x.dtype, "all_reduce_sum"),
                                ncclSum, comm_, s),
               "all_reduce_sum");
  }

  // Each rank writes its columns into a zeroed out and the ranks sum it: zeros add exactly, and
  // this needs no staging buffer for ranks whose widths differ.
  void all_gather(const Tensor& in, Tensor out) override {
    const cudaStream_t s = stream("all_gather");
    SERVE8_CHECK(in.ndim >= 1 && out.ndim >= 1 && in.dim(0) == out.dim(0) && in.dtype == out.dtype,
                 "all_gather: in {} {} and out {} {} need the same rows and dtype", dtype_name(in.dtype),
                 in.shape_str(), dtype_name(out.dtype), out.shape_str());
    const int64_t rows = in.dim(0), width = in.row_size(), total = out.row_size();
    const int64_t offset = column_offset(width, s);
    SERVE8_CHECK(offset + width <= total, "all_gather: rank {}'s columns [{}, {}) do not fit out's {}", rank_, offset,
                 offset + width, total);
    const size_t es = dtype_size(in.dtype);
    SERVE8_CUDA_CHECK(cudaMemsetAsync(out.data, 0, static_cast<size_t>(out.numel()) * es, s));
    SERVE8_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(out.data) + offset * es, total * es, in.data, width * es,
                                        width * es, rows, cudaMemcpyDeviceToDevice, s));
    nccl_check(nccl().AllReduce(out.data, out.data, static_cast<size_t>(out.numel()),
                                nccl_dtype(out.dtype, "all_gather"), ncclSum, comm_, s),
               "all_gather");
  }

  void abort() override {
    if (comm_) nccl().CommAbort(comm_);  // ends this rank's pending collectives; peers' kernels stay
    comm_ = nullptr;
  }

 private:
  cudaStream_t stream(const char* op) const {
    SERVE8_CHECK(comm_ != nullptr, "{}: rank {}'s NCCL group was aborted", op, rank_);
    SERVE8_CHECK(backend_ != nullptr, "{}: rank {}'s NCCL communicator is bound to no backend", op, rank_);
    backend_->on_device();
    return backend_->stream();
  }

  // This rank's first column in all_gather's out: the widths of the ranks before it, exchanged on
  // the first call (a start-up step, never inside a graph capture). A rank's width is fixed.
  int64_t column_offset(int64_t width, cudaStream_t s) {
    if (width_ >= 0) {
      SERVE8_CHECK(width == width_, "all_gather: rank {} gathers {} columns after {}", rank_, width, width_);
      return offset_;
    }
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    SERVE8_CUDA_CHECK(cudaStreamIsCapturing(s, &capturing));
    SERVE8_CHECK(capturing == cudaStreamCaptureStatusNone,
                 "all_gather: the first gather ran inside a CUDA graph capture (run a step before capturing)");
    std::vector<int64_t> widths(static_cast<size_t>(size_));
    SERVE8_CUDA_CHECK(cudaMemcpyAsync(widths_ + rank_, &width, sizeof width, cudaMemcpyHostToDevice, s));
    nccl_check(nccl().AllGather(widths_ + rank_, widths_, 1, ncclInt64, comm_, s), "all_gather (widths)");
    SERVE8_CUDA_CHECK(
        cudaMemcpyAsync(widths.data(), widths_, sizeof(int64_t) * widths.size(), cudaMemcpyDeviceToHost, s));
    SERVE8_CUDA_CHECK(cudaStreamSynchronize(s));
    width_ = width;
    offset_ = std::accumulate(widths.begin(), widths.begin() + rank_, int64_t{0});
    return offset_;
  }

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  CudaBackend* backend_ = nullptr;
  int64_t* widths_ = nullptr;  // [size] on this rank's GPU
  int64_t width_ = -1, offset_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(int n) {
  std::vector<int> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  int current = 0;
  SERVE8_CUDA_CHECK(cudaGetDevice(&current));
  nccl_check(nccl().CommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  SERVE8_CUDA_CHECK(cudaSetDevice(current));
  int version = 0;
  nccl().GetVersion(&version);
  spdlog::info("NCCL {}: {} ranks on GPUs 0..{}", version, n, n - 1);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < n; ++r) out.push_back(std::make_unique<NcclCommunicator>(comms[static_cast<size_t>(r)], r, n));
  return out;
}

}  // namespace serve8
