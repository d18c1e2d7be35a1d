// bench/gemm: decode-sized GEMMs (M = 1..64 rows) on the weight matrices of Llama-3-8B,
// Llama-2-13B and Llama-2-70B, against the machine's copy bandwidth measured in the same run.
// Kernels: serve8's FP8 GEMM as the backend dispatches it (gemm_fp8: the skinny wgmma kernel up to
// 16 rows, its TMA kernel to 64, cuBLASLt above and where gemm_choices_table.inc says), the
// skinny kernels as planned ("serve8 skinny", bench/gemm/choices.py's input), its weight-only FP8
// GEMM (gemm_fp8_weights, bf16 inputs: the skinny kernel up to 64 rows, the widened matrix and
// cuBLASLt above), cuBLASLt FP8 (e4m3 with per-row and per-channel scales), the skinny kernel at
// forced split counts (--splits; the TMA kernel's from 17 rows), and for bf16 weights cuBLASLt
// bf16 against the skinny kernel on bf16 weights up to 16 rows ("serve8 skinny bf16").
//
//   bench_gemm [--out gemm_bench.json] [--reps N] [--m 1,4,64] [--filter TEXT] [--splits 1,2,4]
//              [--algos N]
//
// --algos N adds cuBLASLt's FP8 and bf16 GEMMs with the 2nd..Nth algorithms of its heuristic
// ("cublaslt fp8 #2", ...), where the shape has that many: whether its first choice is its best.
//
// A row's bytes are the weight, the input rows and the output rows; fraction_of_copy is its rate
// over the copy bandwidth (read + write) for one launch after an L2 flush, graph_fraction_of_copy
// for launches back to back in a CUDA graph on distinct weight copies (as in a decode step).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "attention/bench_kernels.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/skinny_gemm.h"
#include "cli/build_info.h"
#include "core/error.h"

namespace serve8 {
namespace {

using Json = nlohmann::json;

struct Matrix {
  const char* model;
  const char* name;
  int64_t n, k;
};
constexpr Matrix kMatrices[] = {
    {"llama-3-8b", "qkv", 6144, 4096},       {"llama-3-8b", "o", 4096, 4096},
    {"llama-3-8b", "gate_up", 28672, 4096},  {"llama-3-8b", "down", 4096, 14336},
    {"llama-2-13b", "qkv", 15360, 5120},     {"llama-2-13b", "o", 5120, 5120},
    {"llama-2-13b", "gate_up", 27648, 5120}, {"llama-2-13b", "down", 5120, 13824},
    {"llama-2-70b", "qkv", 10240, 8192},     {"llama-2-70b", "o", 8192, 8192},
    {"llama-2-70b", "gate_up", 57344, 8192}, {"llama-2-70b", "down", 8192, 28672},
};

// Median milliseconds of fn over reps runs, each after reading a buffer twice the L2's size
// (clean lines of other data), with a spin first so the host's launch latency stays out.
template <typename F>
double time_cold_ms(cudaStream_t s, int reps, const void* flush, size_t flush_bytes, unsigned* sink, F&& fn) {
  fn();
  cudaEvent_t a, b;
  SERVE8_CUDA_CHECK(cudaEventCreate(&a));
  SERVE8_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    launch_l2_fill_read(flush, flush_bytes, sink, s);
    launch_spin(50.0, s);
    SERVE8_CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    SERVE8_CUDA_CHECK(cudaEventRecord(b, s));
    SERVE8_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SERVE8_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median milliseconds per launch of fn(0) ... fn(copies - 1) captured back to back in one CUDA
// graph, as a decode step runs them: each launch reads its own copy of the weights (together
// several times the L2), and the gaps between launches are the graph's, not the host's.
template <typename F>
double time_graph_ms(cudaStream_t s, int reps, int copies, F&& fn) {
  for (int c = 0; c < copies; ++c) fn(c);  // plans and handles outside the capture
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  SERVE8_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int c = 0; c < copies; ++c) fn(c);
  SERVE8_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  SERVE8_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  SERVE8_CUDA_CHECK(cudaGraphLaunch(exec, s));
  cudaEvent_t a, b;
  SERVE8_CUDA_CHECK(cudaEventCreate(&a));
  SERVE8_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    launch_spin(50.0, s);
    SERVE8_CUDA_CHECK(cudaEventRecord(a, s));
    SERVE8_CUDA_CHECK(cudaGraphLaunch(exec, s));
    SERVE8_CUDA_CHECK(cudaEventRecord(b, s));
    SERVE8_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SERVE8_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / copies);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Random valid bytes: e4m3 codes without NaN's, or bf16 values of N(0, 1).
void fill(Backend& be, void* dst, size_t bytes, bool fp8, std::mt19937_64& gen) {
  const size_t block = std::min<size_t>(bytes, 4u << 20);
  std::vector<uint8_t> h(block);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (size_t i = 0; i + (fp8 ? 1 : 2) <= block; i += fp8 ? 1 : 2) {
    if (fp8) {
      h[i] = f32_to_e4m3(nd(gen));
    } else {
      const uint16_t v = f32_to_bf16(nd(gen));
      std::memcpy(&h[i], &v, 2);
    }
  }
  for (size_t off = 0; off < bytes; off += block)
    be.copy_to_device(static_cast<char*>(dst) + off, h.data(), std::min(block, bytes - off));
}

const uint8_t* bytes_of(const Buffer& b) { return static_cast<const uint8_t*>(b.data()); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int run(int argc, char** argv) {
  std::string out_path = "gemm_bench.json", filter;
  int reps = 20;
  std::vector<int64_t> ms_list = {1, 2, 4, 8, 16, 32, 64};
  std::vector<int64_t> splits_list;
  int algos = 1;
  std::string command = "bench_gemm";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    command += " " + a;
    if (i + 1 >= argc) throw std::runtime_error("bench_gemm: " + a + " needs a value");
    const std::string v = argv[++i];
    command += " " + v;
    if (a == "--out") {
      out_path = v;
    } else if (a == "--reps") {
      reps = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--algos") {
      algos = std::clamp(std::atoi(v.c_str()), 1, 16);
    } else if (a == "--filter") {
      filter = v;
    } else if (a == "--m" || a == "--splits") {
      std::vector<int64_t>& list = a == "--m" ? ms_list : splits_list;
      list.clear();
      std::stringstream ss(v);
      for (std::string x; std::getline(ss, x, ',');) list.push_back(std::atoll(x.c_str()));
    } else {
      throw std::runtime_error("bench_gemm: unknown argument " + a);
    }
  }
  auto owner = create_backend("cuda");
  auto& be = dynamic_cast<CudaBackend&>(*owner);
  const cudaStream_t s = be.stream();
  std::mt19937_64 gen(1);
  int dev = 0;
  cudaDeviceProp props{};
  SERVE8_CUDA_CHECK(cudaGetDevice(&dev));
  SERVE8_CUDA_CHECK(cudaGetDeviceProperties(&props, dev));
  const size_t flush_bytes = 2 * static_cast<size_t>(props.l2CacheSize);
  Buffer flush(be, flush_bytes), sink(be, 64);
  unsigned* sinkp = static_cast<unsigned*>(sink.data());

  double copy_gbs = 0;
  {
    const size_t bytes = size_t{4} << 30;
    Buffer src(be, bytes), dst(be, bytes);
    const double ms = time_cold_ms(s, 10, flush.data(), flush_bytes, sinkp, [&] {
      SERVE8_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, s));
    });
    copy_gbs = 2.0 * static_cast<double>(bytes) / ms / 1e6;
  }
  std::printf("device: %s\ncopy: %.0f GB/s\n\n", be.device_description().c_str(), copy_gbs);
  std::printf("%-22s %3s %-18s %9s %7s %9s %7s\n", "matrix", "M", "kernel", "cold ms", "%copy", "graph ms", "%copy");

  CublasLtGemm lt(s);
  std::vector<std::unique_ptr<CublasLtGemm>> ranked;  // ranked[r - 1]: the heuristic's algorithm r
  for (int r = 1; r < algos; ++r) ranked.push_back(std::make_unique<CublasLtGemm>(s, r));
  SkinnyGemm skinny(props.multiProcessorCount);
  const int64_t max_m = *std::max_element(ms_list.begin(), ms_list.end());
  // Weight-only FP8 above 16 rows widens the matrix into a buffer sized here, as a model does.
  StepLimits limits{static_cast<int>(max_m), 1, 1, 1, 64};
  for (const Matrix& mat : kMatrices)
    limits.fp8_weight_only_elems = std::max(limits.fp8_weight_only_elems, mat.n * mat.k);
  be.reserve_steps(limits);
  Json rows = Json::array();
  for (const Matrix& mat : kMatrices) {
    const std::string label = std::string(mat.model) + " " + mat.name;
    if (!filter.empty() && label.find(filter) == std::string::npos) continue;
    const int64_t n = mat.n, k = mat.k;
    // Weight copies for the graph timing: together at least three L2s.
    const int copies = static_cast<int>(std::max<int64_t>(2, (3 * int64_t(props.l2CacheSize) + n * k - 1) / (n * k)));
    Buffer w8(be, size_t(n * k) * copies), w16(be, size_t(n * k) * 2 * copies), ws(be, size_t(n) * 4);
    Buffer x8(be, size_t(max_m * k)), x16(be, size_t(max_m * k) * 2), xs(be, size_t(max_m) * 4);
    Buffer out(be, size_t(max_m * n) * 2);
    fill(be, w8.data(), w8.bytes(), true, gen);
    fill(be, w16.data(), w16.bytes(), false, gen);
    fill(be, x8.data(), x8.bytes(), true, gen);
    fill(be, x16.data(), x16.bytes(), false, gen);
    const std::vector<float> ones(static_cast<size_t>(std::max(n, max_m)), 0.01f);
    be.copy_to_device(ws.data(), ones.data(), size_t(n) * 4);
    be.copy_to_device(xs.data(), ones.data(), size_t(max_m) * 4);
    for (const int64_t m : ms_list) {
      const Tensor tx8 = x8.view(DType::kFP8E4M3, {m, k}), txs = xs.view(DType::kF32, {m});
      const Tensor tws = ws.view(DType::kF32, {n}), tout = out.view(DType::kBF16, {m, n});
      const Tensor tx16 = x16.view(DType::kBF16, {m, k});
      const auto w8_copy = [&](int c) { return bytes_of(w8) + size_t(n * k) * size_t(c); };
      const auto w16_copy = [&](int c) { return bytes_of(w16) + size_t(n * k) * 2 * size_t(c); };
      struct Kernel {
        std::string name;
        double weight_bytes;
        std::function<void(int)> fn;  // on weight copy c
        double input_bytes = 1;       // per input element: e4m3 or bf16
      };
      std::vector<Kernel> kernels;
      kernels.push_back({"serve8 fp8", double(n * k), [&](int c) {
                           const Tensor tw8(const_cast<uint8_t*>(w8_copy(c)), DType::kFP8E4M3, {n, k});
                           be.gemm_fp8(tx8, txs, tw8, tws, nullptr, tout);
                         }});
      kernels.push_back({"serve8 fp8 w-only", double(n * k),
                         [&](int c) {
                           const Tensor tw8(const_cast<uint8_t*>(w8_copy(c)), DType::kFP8E4M3, {n, k});
                           be.gemm_fp8_weights(tx16, tw8, tws, nullptr, tout);
                         },
                         2});
      GemmArgs fa;
      fa.x = x8.data();
      fa.out = out.data();
      fa.m = m;
      fa.n = n;
      fa.k = k;
      fa.in_type = CUDA_R_8F_E4M3;
      fa.x_scale = static_cast<const float*>(xs.data());
      fa.w_scale = static_cast<const float*>(ws.data());
      kernels.push_back({"cublaslt fp8", double(n * k), [&, fa](int c) {
                           GemmArgs g = fa;
                           g.w = w8_copy(c);
                           lt.run(g);
                         }});
      SkinnyGemmArgs sa;
      sa.x = bytes_of(x8);
      sa.x_scale = fa.x_scale;
      sa.w_scale = fa.w_scale;
      sa.out = out.data();
      sa.m = m;
      sa.n = n;
      sa.k = k;
      // serve8's own kernel as planned, whatever gemm_choices_table.inc says (bench/gemm/choices.py).
      if (const SkinnyGemmPlan plan = skinny.plan(m, n, k); plan.token_tile != 0)
        kernels.push_back({"serve8 skinny", double(n * k), [&, sa, plan](int c) {
                             SkinnyGemmArgs g = sa;
                             g.w = w8_copy(c);
                             SERVE8_CHECK(skinny.run(g, plan, s), "bench_gemm: the skinny kernel refused its own plan");
                           }});
      for (const int64_t splits : splits_list) {
        SkinnyGemmPlan plan = skinny_gemm_with_splits(m, n, k, static_cast<int>(splits));
        if (m > kSkinnyMaxRows) plan = skinny_tma_with_splits(m, n, k, static_cast<int>(splits));
        if (plan.token_tile == 0 || plan.splits != splits || plan.workspace_bytes > skinny.workspace_bytes()) continue;
        kernels.push_back({"skinny s" + std::to_string(splits), double(n * k), [&, sa, plan](int c) {
                             SkinnyGemmArgs g = sa;
                             g.w = w8_copy(c);
                             SERVE8_CHECK(skinny.run(g, plan, s), "bench_gemm: the skinny kernel refused a plan");
                           }});
      }
      GemmArgs ba = fa;
      ba.x = x16.data();
      ba.in_type = CUDA_R_16BF;
      ba.x_scale = ba.w_scale = nullptr;
      kernels.push_back({"cublaslt bf16", double(n * k) * 2,
                         [&, ba](int c) {
                           GemmArgs g = ba;
                           g.w = w16_copy(c);
                           lt.run(g);
                         },
                         2});
      // serve8's skinny kernel on bf16 weights as planned, whatever the table says.
      SkinnyGemmArgs sb = sa;
      sb.x = x16.data();
      sb.x_bf16 = sb.w_bf16 = true;
      sb.x_scale = sb.w_scale = nullptr;
      if (const SkinnyGemmPlan plan = skinny.plan(m, n, k, true, true); plan.token_tile != 0)
        kernels.push_back({"serve8 skinny bf16", double(n * k) * 2,
                           [&, sb, plan](int c) {
                             SkinnyGemmArgs g = sb;
                             g.w = w16_copy(c);
                             SERVE8_CHECK(skinny.run(g, plan, s),
                                          "bench_gemm: the skinny kernel refused its bf16 plan");
                           },
                           2});
      for (int r = 1; r < algos; ++r) {
        CublasLtGemm& g = *ranked[static_cast<size_t>(r - 1)];
        const std::string tag = " #" + std::to_string(r + 1);
        for (const bool bf16 : {false, true}) {
          GemmArgs a = bf16 ? ba : fa;
          a.w = bf16 ? static_cast<const void*>(w16_copy(0)) : static_cast<const void*>(w8_copy(0));
          try {
            g.run(a);  // plans it, or refuses: fewer algorithms than r + 1
          } catch (const std::exception&) {
            continue;
          }
          kernels.push_back({(bf16 ? "cublaslt bf16" : "cublaslt fp8") + tag, double(n * k) * (bf16 ? 2 : 1),
                             [&, a, bf16](int c) {
                               GemmArgs x = a;
                               x.w = bf16 ? static_cast<const void*>(w16_copy(c)) : w8_copy(c);
                               g.run(x);
                             },
                             bf16 ? 2.0 : 1.0});
        }
      }
      for (const Kernel& kn : kernels) {
        const double ms = time_cold_ms(s, reps, flush.data(), flush_bytes, sinkp, [&] { kn.fn(0); });
        const double graph_ms = time_graph_ms(s, reps, copies, kn.fn);
        const double in_bytes = double(m * k) * kn.input_bytes;
        const double bytes = kn.weight_bytes + in_bytes + double(m * n) * 2;
        const double gbs = bytes / ms / 1e6, graph_gbs = bytes / graph_ms / 1e6;
        std::printf("%-22s %3lld %-18s %9.4f %6.1f%% %9.4f %6.1f%%\n", label.c_str(), static_cast<long long>(m),
                    kn.name.c_str(), ms, 100.0 * gbs / copy_gbs, graph_ms, 100.0 * graph_gbs / copy_gbs);
        rows.push_back({{"model", mat.model},
                        {"matrix", mat.name},
                        {"m", m},
                        {"n", n},
                        {"k", k},
                        {"kernel", kn.name},
                        {"ms", ms},
                        {"bytes", bytes},
                        {"gb_per_s", gbs},
                        {"fraction_of_copy", gbs / copy_gbs},
                        {"graph_ms", graph_ms},
                        {"graph_copies", copies},
                        {"graph_fraction_of_copy", graph_gbs / copy_gbs}});
      }
    }
  }
  Json doc = {{"command", command},
              {"git_hash", build_commit()},
              {"device", be.device_description()},
              {"date", utc_now()},
              {"copy_gb_per_s", copy_gbs},
              {"reps", reps},
              {"l2_flush_bytes", flush_bytes},
              {"rows", rows}};
  std::ofstream(out_path) << doc.dump(1) << "\n";
  std::printf("\nwrote %s\n", out_path.c_str());
  return 0;
}

}  // namespace
}  // namespace serve8

int main(int argc, char** argv) {
  try {
    return serve8::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
}
