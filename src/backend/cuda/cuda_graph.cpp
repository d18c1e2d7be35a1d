// CUDA graphs of the backend's stream: a decode step's ~10 launches per layer replay as one.
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace serve8 {
namespace {

class CudaStepGraph final : public StepGraph {
 public:
  CudaStepGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { SERVE8_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

std::unique_ptr<StepGraph> CudaBackend::capture(const std::function<void()>& body) {
  on_device();
  SERVE8_CHECK(!profiler_.on(), "capture: CUDA graphs cannot be captured while ops are profiled");
  // Thread-local mode: CUDA calls of other threads (tensor-parallel ranks capturing their own
  // graphs at the same time) are not caught up in the capture.
  SERVE8_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  SERVE8_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  SERVE8_CUDA_CHECK(err);
  return std::make_unique<CudaStepGraph>(exec, stream_);
}

void CudaBackend::set_op_profiling(bool on) {
  on_device();
  profiler_.set(on);
}

std::vector<OpTime> CudaBackend::op_profile() {
  on_device();
  return profiler_.totals();
}

void CudaBackend::set_kernel_tracing(bool on) {
  on_device();
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (on) {
    trace_.start();
  } else {
    trace_.stop();
  }
}

std::vector<KernelSpan> CudaBackend::kernel_trace() {
  on_device();
  SERVE8_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return trace_.stop();
}

}  // namespace serve8
