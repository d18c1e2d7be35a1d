// bench/attention: the attention kernels over a grid of shapes, against the machine's own copy
// bandwidth measured in the same run (decode is memory bound) and in TFLOP/s (prefill is compute
// bound). Every case is timed cold (the L2 is filled with other data before each run: ColdL2;
// --l2-flush none keeps it warm) and checked: a sample of its rows is recomputed by the CPU
// reference backend from the same KV bytes.
//
//   bench_attention [--out results.json] [--reps N] [--quick] [--filter TEXT]... [--l2-flush read|write|none]
//                   [--slots shuffled|contiguous] [--decode-heads 1|2] [--decode-chunk N]
//
// --slots: a sequence's pages of 16 slots drawn at random over the pool (default: a long-running
// server's) or in order (a fresh pool's allocation).
// --decode-heads: KV heads per decode block for the pools that may pair them (FP8; default:
// the plan's choice), to time one choice against the other.
// --decode-chunk: KV tokens per decode split (default: the plan's rule), for sweeping the split.
// --filter keeps the rows whose label "heads kind B=.. q=.. kv=.. kv_dtype" contains TEXT (any of
// several).
//
// Grid: Llama-2-13B heads (40/40, d128) and Llama-3-8B heads (32/8, d128); decode at
// batch 1/16/64/256 over contexts 512..32768; prefill (q = kv) and extend (512 new tokens over a
// cached prefix); KV bf16, fp8_e5m2, fp8_e4m3 (E4M3 with non-unit per-head scales). Cases whose
// bf16 KV would pass 48 GiB are skipped and listed as such.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "bench_kernels.h"
#include "cli/build_info.h"
#include "core/error.h"

namespace serve8 {
namespace {

using Json = nlohmann::json;

struct Heads {
  const char* name;
  int hq, hkv, d;
};

struct Shape {
  const char* kind;  // decode | prefill | extend
  int batch, q_len, ctx;
};

constexpr double kMaxKvBytes = 48.0 * (1ull << 30);

// How the L2 is made cold before each timed run. kRead (default) reads a buffer twice the L2's
// size, leaving it full of clean lines; kWrite overwrites the buffer with cudaMemsetAsync, as
// before, which leaves it full of dirty lines that the timed kernel then pays to write back
// (about the L2's size at copy speed: ~14 us on the H200, 10% of a 0.15 ms decode). kNone leaves
// the last run's K/V in the L2: where they fit, a kernel's time without DRAM, bound by its own
// instructions.
enum class L2Flush { kRead, kWrite, kNone };

struct ColdL2 {
  L2Flush how = L2Flush::kRead;
  void* buf = nullptr;
  size_t bytes = 0;
  unsigned* sink = nullptr;
  void operator()(cudaStream_t s, int i) const {
    if (bytes == 0 || how == L2Flush::kNone) return;
    if (how == L2Flush::kWrite) {
      SERVE8_CUDA_CHECK(cudaMemsetAsync(buf, i & 0xff, bytes, s));
    } else {
      launch_l2_fill_read(buf, bytes, sink, s);
    }
  }
};

// Median milliseconds of fn over reps runs, each after the L2 was made cold, timed with events
// around fn alone; a spin before the first event hides the host's launch latency (launch_spin).
template <typename F>
double time_cold_ms(cudaStream_t s, int reps, const ColdL2& cold, F&& fn) {
  fn();  // warm-up: lazy plans and workspaces
  cudaEvent_t a, b;
  SERVE8_CUDA_CHECK(cudaEventCreate(&a));
  SERVE8_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cold(s, i);
    launch_spin(100.0, s);
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

// Fills `bytes` of device memory with a host block of `block` bytes, then doubles it on the device.
void fill_from_block(Backend& be, cudaStream_t s, void* dst, size_t bytes, const void* host, size_t block) {
  be.copy_to_device(dst, host, block);
  for (size_t done = block; done < bytes;) {
    const size_t n = std::min(done, bytes - done);
    SERVE8_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + done, dst, n, cudaMemcpyDeviceToDevice, s));
    done += n;
  }
}

// Fills device memory with valid codes of dtype t (normal values, no NaN): one random 4 MiB block
// from the host, then doubled on the device.
void fill_random(Backend& be, cudaStream_t s, void* dst, size_t bytes, DType t, std::mt19937_64& gen) {
  const size_t block = std::min<size_t>(bytes, 4u << 20);
  std::vector<uint8_t> h(block);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t es = dtype_size(t);
  for (size_t i = 0; i + es <= block; i += es) {
    const float x = nd(gen);
    if (t == DType::kI8 || t == DType::kI4) {  // codes: int8 within +-127 (stored + 128), any int4 pair
      h[i] = t == DType::kI8 ? static_cast<uint8_t>(128 + static_cast<int>(std::clamp(x * 40.0f, -127.0f, 127.0f)))
                             : static_cast<uint8_t>(gen());
    } else if (t == DType::kBF16) {
      const uint16_t v = f32_to_bf16(x);
      std::memcpy(&h[i], &v, 2);
    } else if (t == DType::kFP8E5M2) {
      h[i] = f32_to_e5m2(x);
    } else {
      h[i] = f32_to_e4m3(x);
    }
  }
  fill_from_block(be, s, dst, bytes, h.data(), block);
}

// Fills an int8 (fp16 scale) or int4 (fp16 scale and minimum) pool's row parameters with values
// around those of unit-normal rows.
void fill_row_params(Backend& be, cudaStream_t s, const Tensor& params, DType t, std::mt19937_64& gen) {
  const size_t bytes = static_cast<size_t>(params.nbytes());
  const size_t block = std::min<size_t>(bytes, 4u << 20) / 4 * 4;
  std::vector<uint32_t> h(block / 4);
  std::uniform_real_distribution<float> u(0.8f, 1.25f);
  for (uint32_t& w : h) {
    if (t == DType::kI8) {
      w = uint32_t{f32_to_f16(u(gen) * 2.5f / 127.0f)} | (uint32_t{f32_to_f16(u(gen) * 2.5f / 127.0f)} << 16);
    } else {
      w = uint32_t{f32_to_f16(u(gen) * 5.0f / 15.0f)} | (uint32_t{f32_to_f16(-2.5f * u(gen))} << 16);
    }
  }
  fill_from_block(be, s, params.data, bytes, h.data(), block);
}

// Pages of kKvPageSize slots a sequence of sh.ctx tokens fills.
int64_t pages_per_seq(const Shape& sh) { return (sh.ctx + kKvPageSize - 1) / kKvPageSize; }

// The batch: `batch` sequences of ctx tokens, the last q_len of them new, sequence b on table row b
// (a fresh row: the batch carries all its slots); each sequence fills whole pages, in order, of
// pages shuffled over the pool (as a long-running server's allocator hands them out) or, with
// `contiguous`, of consecutive pages.
ForwardBatch make_batch(const Shape& sh, std::mt19937_64& gen, bool contiguous) {
  const int64_t pages = pages_per_seq(sh);
  std::vector<int32_t> perm(static_cast<size_t>(sh.batch * pages));
  std::iota(perm.begin(), perm.end(), 1);  // page 0 holds the reserved slot 0
  if (!contiguous) std::shuffle(perm.begin(), perm.end(), gen);
  ForwardBatch fb;
  const std::vector<int32_t> new_tokens(static_cast<size_t>(sh.q_len), 1);
  std::vector<int32_t> slots(static_cast<size_t>(sh.ctx));
  for (int b = 0; b < sh.batch; ++b) {
    for (int i = 0; i < sh.ctx; ++i)
      slots[static_cast<size_t>(i)] =
          perm[static_cast<size_t>(b * pages + i / kKvPageSize)] * kKvPageSize + i % kKvPageSize;
    fb.add_sequence(b, sh.ctx, new_tokens, slots);
  }
  return fb;
}

// The pool and table of one case: one row per sequence, rows of ctx slots.
KvCacheConfig case_kv_config(const Heads& h, const Shape& sh, DType dt) {
  KvCacheConfig c{1, h.hkv, h.d, dt, (int64_t{sh.batch} * pages_per_seq(sh) + 1) * kKvPageSize};
  c.max_requests = sh.batch;
  c.max_context_len = sh.ctx;
  return c;
}

struct CheckResult {
  double max_abs_err = 0.0, max_ref = 0.0;
  int rows = 0;
};

// Recomputes the last `rows` query rows of sequence b on the CPU backend from the same KV bytes
// (gathered on the device by the slots of the uploaded batch's kv_indices, as the backend read them
// from its table; one copy), and compares with the GPU's output.
CheckResult check_sequence(CudaBackend& gpu, Backend& cpu, const Heads& h, const DeviceBatch& db, int b,
                           const KvLayer& layer, const KvScales& scales, DType kv, const std::vector<uint16_t>& q_host,
                           const Tensor& out, int rows) {
  const ForwardBatch& fb = *db.host;
  const int kv0 = fb.kv_indptr[static_cast<size_t>(b)], kv_len = fb.kv_indptr[static_cast<size_t>(b) + 1] - kv0;
  const int q0 = fb.qo_indptr[static_cast<size_t>(b)], q_len = fb.qo_indptr[static_cast<size_t>(b) + 1] - q0;
  rows = std::min(rows, q_len);
  // The sequence's slots as the kernels read them (the uploaded kv_indices); each (slot, head) row
  // of K and V, and its parameters, gathered on the device, then put at slots 1..kv_len of a CPU pool.
  const int64_t hkv = h.hkv, n = int64_t{kv_len} * hkv;
  std::vector<int32_t> seq_slots(static_cast<size_t>(kv_len)), src_rows(static_cast<size_t>(n));
  gpu.copy_to_host(seq_slots.data(), static_cast<const int32_t*>(db.kv_indices.data) + kv0, seq_slots.size() * 4);
  for (int64_t j = 0; j < kv_len; ++j)
    for (int64_t hh = 0; hh < hkv; ++hh)
      src_rows[static_cast<size_t>(j * hkv + hh)] =
          static_cast<int32_t>(kv_row(seq_slots[static_cast<size_t>(j)], hh, hkv));
  Buffer ridx(gpu, src_rows.size() * 4);
  gpu.copy_to_device(ridx.data(), src_rows.data(), src_rows.size() * 4);
  const Tensor rows_t = ridx.view(DType::kI32, {n});
  KvCacheConfig cc{1, h.hkv, h.d, kv, kv_len + 1};
  cc.max_requests = 1;
  cc.max_context_len = kv_len;
  auto cache = cpu.create_kv_cache(cc, scales);
  const KvLayer cl = cache->layer(0);
  const int64_t width = kv_pool_width(kv, h.d);
  const size_t rb = static_cast<size_t>(width) * dtype_size(kv);
  const auto put = [&](const Tensor& pool, int64_t w, DType t, size_t bytes, void* dst) {
    Buffer buf(gpu, static_cast<size_t>(n) * bytes);
    gpu.gather_rows(Tensor(pool.data, t, {static_cast<int64_t>(pool.nbytes() / bytes), w}), rows_t,
                    buf.view(t, {n, w}));
    std::vector<char> host(static_cast<size_t>(n) * bytes);
    gpu.copy_to_host(host.data(), buf.data(), host.size());
    for (int64_t j = 0; j < kv_len; ++j)
      for (int64_t hh = 0; hh < hkv; ++hh)
        std::memcpy(static_cast<char*>(dst) + kv_row(1 + j, hh, hkv) * bytes,
                    host.data() + static_cast<size_t>(j * hkv + hh) * bytes, bytes);
  };
  put(layer.k, width, kv, rb, cl.k.data);
  put(layer.v, width, kv, rb, cl.v.data);
  if (kv_dtype_is_rotated(kv)) {  // a row pair's fp16 parameters, K's then V's
    const int64_t r = kv_row_param_bytes(kv);
    put(layer.row_params, r, DType::kF16, static_cast<size_t>(2 * r), cl.row_params.data);
  }
  // The last `rows` queries: causal over the whole sequence, its KV in slots 1..kv_len.
  std::vector<int32_t> slots(static_cast<size_t>(kv_len));
  std::iota(slots.begin(), slots.end(), 1);
  ForwardBatch cb;
  cb.add_sequence(0, kv_len, std::vector<int32_t>(static_cast<size_t>(rows), 1), slots);
  const int64_t row_elems = int64_t{h.hq} * h.d;
  const int64_t first_row = q0 + q_len - rows;
  std::vector<float> q(static_cast<size_t>(rows * row_elems)), ref(q.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = bf16_to_f32(q_host[static_cast<size_t>(first_row * row_elems) + i]);
  const DeviceBatch cdb = cpu.upload_batch(cb, *cache);
  cpu.attention(Tensor(q.data(), DType::kF32, {rows, h.hq, h.d}), cl, cdb, 1.0f / std::sqrt(float(h.d)),
                Tensor(ref.data(), DType::kF32, {rows, h.hq, h.d}));
  std::vector<uint16_t> got(q.size());
  gpu.copy_to_host(got.data(), static_cast<const uint16_t*>(out.data) + first_row * row_elems, got.size() * 2);
  CheckResult r;
  r.rows = rows;
  for (size_t i = 0; i < ref.size(); ++i) {
    r.max_abs_err = std::max(r.max_abs_err, static_cast<double>(std::fabs(bf16_to_f32(got[i]) - ref[i])));
    r.max_ref = std::max(r.max_ref, static_cast<double>(std::fabs(ref[i])));
  }
  return r;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int run(int argc, char** argv) {
  std::string out_path = "attention_bench.json";
  int reps = 10;
  bool quick = false;
  L2Flush flush_how = L2Flush::kRead;
  bool contiguous_slots = false;
  int decode_heads = 0;              // the plan's choice
  int decode_chunk = 0;              // the plan's rule
  std::vector<std::string> filters;  // run only rows whose "heads kind shape kv" label holds one
  std::string command = "bench_attention";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    command += " " + a;
    if (a == "--out" && i + 1 < argc) {
      out_path = argv[++i];
      command += std::string(" ") + argv[i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
      command += std::string(" ") + argv[i];
    } else if (a == "--l2-flush" && i + 1 < argc) {
      const std::string how = argv[++i];
      command += " " + how;
      if (how != "read" && how != "write" && how != "none")
        fail("bench_attention: --l2-flush takes read, write or none, not '{}'", how);
      flush_how = how == "read" ? L2Flush::kRead : how == "write" ? L2Flush::kWrite : L2Flush::kNone;
    } else if (a == "--slots" && i + 1 < argc) {
      const std::string how = argv[++i];
      command += " " + how;
      if (how != "shuffled" && how != "contiguous")
        fail("bench_attention: --slots takes shuffled or contiguous, not '{}'", how);
      contiguous_slots = how == "contiguous";
    } else if (a == "--decode-heads" && i + 1 < argc) {
      decode_heads = std::atoi(argv[++i]);
      command += std::string(" ") + argv[i];
      if (decode_heads != 1 && decode_heads != 2)
        fail("bench_attention: --decode-heads takes 1 or 2, not '{}'", argv[i]);
    } else if (a == "--decode-chunk" && i + 1 < argc) {
      decode_chunk = std::atoi(argv[++i]);
      command += std::string(" ") + argv[i];
      if (decode_chunk < 16)
        fail("bench_attention: --decode-chunk takes a token count of 16 or more, not '{}'", argv[i]);
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--filter" && i + 1 < argc) {
      filters.push_back(argv[++i]);
      command += std::string(" ") + argv[i];
    } else {
      fail(
          "bench_attention: unknown argument '{}' (--out FILE, --reps N, --quick, --filter TEXT..., --l2-flush "
          "read|write|none, --slots shuffled|contiguous, --decode-heads 1|2, --decode-chunk N)",
          a);
    }
  }
  auto owner = create_cuda_backend(DType::kBF16, AttentionOptions{decode_heads, decode_chunk});
  auto& be = dynamic_cast<CudaBackend&>(*owner);
  auto cpu = create_backend("cpu");
  const cudaStream_t s = be.stream();
  std::mt19937_64 gen(1);

  // The ceiling: device-to-device copy, bytes read + written.
  const size_t copy_bytes = size_t{4} << 30;
  double copy_gbs = 0;
  {
    Buffer src(be, copy_bytes), dst(be, copy_bytes);
    const double ms = time_cold_ms(s, 10, ColdL2{}, [&] {
      SERVE8_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice, s));
    });
    copy_gbs = 2.0 * static_cast<double>(copy_bytes) / ms / 1e6;
  }
  int l2 = 0;
  SERVE8_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const size_t flush_bytes = std::max<size_t>(2 * static_cast<size_t>(l2), 64u << 20);
  Buffer flush(be, flush_bytes), sink(be, 4);
  SERVE8_CUDA_CHECK(cudaMemsetAsync(flush.data(), 0, flush_bytes, s));
  const ColdL2 cold{flush_how, flush.data(), flush_bytes, static_cast<unsigned*>(sink.data())};
  const char* flush_name = flush_how == L2Flush::kRead ? "read" : flush_how == L2Flush::kWrite ? "write" : "none";
  std::printf("device: %s\ncopy bandwidth: %.0f GB/s (read + write); ", be.device_description().c_str(), copy_gbs);
  if (flush_how == L2Flush::kNone) {
    std::printf("L2 left warm between runs\n");
  } else {
    std::printf("L2 made cold before each run by a %s of %zu MiB\n", flush_name, flush_bytes >> 20);
  }

  const Heads heads[] = {{"llama-3-8b (32/8, d128)", 32, 8, 128}, {"llama-2-13b (40/40, d128)", 40, 40, 128}};
  std::vector<Shape> shapes;
  const std::vector<int> batches = quick ? std::vector<int>{1, 64} : std::vector<int>{1, 16, 64, 256};
  const std::vector<int> ctxs = quick ? std::vector<int>{512, 4096} : std::vector<int>{512, 2048, 4096, 8192, 32768};
  for (int b : batches)
    for (int c : ctxs) shapes.push_back({"decode", b, 1, c});
  for (int c : quick ? std::vector<int>{2048} : std::vector<int>{512, 2048, 8192})
    shapes.push_back({"prefill", 1, c, c});
  for (int c : quick ? std::vector<int>{2048} : std::vector<int>{2048, 8192}) shapes.push_back({"extend", 4, 512, c});

  Json rows = Json::array();
  int sms = 0;
  SERVE8_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // Columns for decode rows: the read-only ceilings of the same bytes (read_ceiling.h), streamed
  // front to back and gathered by slot as decode gathers them, in % of the copy bandwidth.
  std::printf("\n%-26s %-8s %-22s %-9s %9s %9s %7s %9s %10s %8s %8s\n", "heads", "kind", "shape", "kv", "ms", "GB/s",
              "%copy", "TFLOP/s", "check err", "%stream", "%gather");
  for (const Heads& h : heads) {
    // The largest step of the grid, in this head geometry (attention is planned at upload for it).
    StepLimits limits{0, 0, h.hq, h.hkv, h.d};
    for (const Shape& sh : shapes) {
      limits.max_tokens = std::max(limits.max_tokens, sh.batch * sh.q_len);
      limits.max_seqs = std::max(limits.max_seqs, sh.batch);
    }
    be.reserve_steps(limits);
    for (const Shape& sh : shapes) {
      const int64_t tokens = int64_t{sh.batch} * sh.ctx;
      const double kv_bf16 = static_cast<double>(tokens) * h.hkv * h.d * 2 * 2;
      char shape[64];
      std::snprintf(shape, sizeof shape, "B=%d q=%d kv=%d", sh.batch, sh.q_len, sh.ctx);
      if (kv_bf16 > kMaxKvBytes) {
        rows.push_back({{"heads", h.name},
                        {"kind", sh.kind},
                        {"batch", sh.batch},
                        {"q_len", sh.q_len},
                        {"ctx", sh.ctx},
                        {"skipped", "bf16 KV over 48 GiB"}});
        continue;
      }
      const auto label = [&](DType dt) {
        std::string s = h.name;
        s += ' ';
        s += sh.kind;
        s += ' ';
        s += shape;
        s += ' ';
        s += dtype_name(dt);
        return s;
      };
      const auto wanted = [&](DType dt) {
        if (filters.empty()) return true;
        const std::string l = label(dt);
        return std::any_of(filters.begin(), filters.end(), [&](const std::string& f) { return l.find(f) != l.npos; });
      };
      const DType kv_dtypes[] = {DType::kBF16, DType::kFP8E5M2, DType::kFP8E4M3, DType::kI8, DType::kI4};
      if (std::none_of(std::begin(kv_dtypes), std::end(kv_dtypes), wanted)) continue;
      const ForwardBatch fb = make_batch(sh, gen, contiguous_slots);
      const int64_t t = fb.num_tokens();
      Buffer q(be, static_cast<size_t>(t) * h.hq * h.d * 2), out(be, q.bytes());
      fill_random(be, s, q.data(), q.bytes(), DType::kBF16, gen);
      std::vector<uint16_t> q_host(static_cast<size_t>(t) * h.hq * h.d);
      be.copy_to_host(q_host.data(), q.data(), q.bytes());
      for (DType dt : kv_dtypes) {
        if (!wanted(dt)) continue;
        KvScales scales = KvScales::ones(1, h.hkv);
        if (dt == DType::kFP8E4M3) {  // per-head scales, so the folding into softmax and output is exercised
          for (int i = 0; i < h.hkv; ++i) {
            scales.k[static_cast<size_t>(i)] = 0.5f + 0.05f * static_cast<float>(i % 16);
            scales.v[static_cast<size_t>(i)] = 1.5f - 0.05f * static_cast<float>(i % 16);
          }
        }
        auto cache = be.create_kv_cache(case_kv_config(h, sh, dt), scales);
        const KvLayer l = cache->layer(0);
        fill_random(be, s, l.k.data, l.k.nbytes(), dt, gen);
        fill_random(be, s, l.v.data, l.v.nbytes(), dt, gen);
        if (kv_dtype_is_rotated(dt)) {
          fill_row_params(be, s, l.row_params, dt, gen);
        }
        // Bytes a (token, KV head) row of K or V takes: int8/int4 with its 4 bytes of parameters.
        const double row_bytes = static_cast<double>(KvCacheConfig::kv_row_bytes(dt, h.d));
        const DeviceBatch db = be.upload_batch(fb, *cache);
        const Tensor tq = q.view(DType::kBF16, {t, h.hq, h.d}), to = out.view(DType::kBF16, {t, h.hq, h.d});
        const float scale = 1.0f / std::sqrt(static_cast<float>(h.d));
        const double ms = time_cold_ms(s, reps, cold, [&] { be.attention(tq, l, db, scale, to); });
        const double bytes = static_cast<double>(tokens) * h.hkv * row_bytes * 2 + 2.0 * t * h.hq * h.d * 2;
        double flops = 0;
        for (int b = 0; b < sh.batch; ++b)
          for (int i = 0; i < sh.q_len; ++i) flops += 4.0 * h.hq * h.d * (sh.ctx - sh.q_len + i + 1);
        // Check the first and the last sequence (their last 16 query rows) on the CPU.
        CheckResult worst;
        for (int b : {0, sh.batch - 1}) {
          const CheckResult c = check_sequence(be, *cpu, h, db, b, l, scales, dt, q_host, to, 16);
          if (c.max_abs_err >= worst.max_abs_err) worst = c;
        }
        const bool ok = worst.max_abs_err <= 1e-2 * std::max(1.0, worst.max_ref);
        double stream_gbs = 0, gather_gbs = 0;
        if (sh.q_len == 1) {
          const double kv_bytes = static_cast<double>(tokens) * h.hkv * row_bytes * 2;
          const size_t half = static_cast<size_t>(kv_bytes / 2) / 16 * 16;
          const double sms_ms = time_cold_ms(s, reps, cold, [&] {
            launch_stream_read(l.k.data, half, static_cast<unsigned*>(sink.data()), s);
            launch_stream_read(l.v.data, half, static_cast<unsigned*>(sink.data()), s);
          });
          // The split count the backend picks for decode (cuda_attention_ops.cpp).
          const int splits = std::clamp((16 * sms + sh.batch * h.hkv - 1) / (sh.batch * h.hkv), 1, 128);
          const double gms = time_cold_ms(s, reps, cold, [&] {
            launch_gather_read(static_cast<const int32_t*>(db.kv_indptr.data),
                               static_cast<const int32_t*>(db.kv_indices.data), l.k.data, l.v.data, sh.batch, h.hkv,
                               static_cast<int>(kv_pool_width(dt, h.d) * dtype_size(dt)), splits,
                               static_cast<unsigned*>(sink.data()), s);
          });
          stream_gbs = 2.0 * static_cast<double>(half) / sms_ms / 1e6;
          gather_gbs = kv_bytes / gms / 1e6;
        }
        std::printf("%-26s %-8s %-22s %-9s %9.3f %9.0f %7.1f %9.1f %10.2e %8.1f %8.1f%s\n", h.name, sh.kind, shape,
                    std::string(dtype_name(dt)).c_str(), ms, bytes / ms / 1e6, 100.0 * bytes / ms / 1e6 / copy_gbs,
                    flops / ms / 1e9, worst.max_abs_err, 100.0 * stream_gbs / copy_gbs, 100.0 * gather_gbs / copy_gbs,
                    ok ? "" : "  CHECK FAILED");
        std::fflush(stdout);
        rows.push_back({{"heads", h.name},
                        {"hq", h.hq},
                        {"hkv", h.hkv},
                        {"head_dim", h.d},
                        {"kind", sh.kind},
                        {"batch", sh.batch},
                        {"q_len", sh.q_len},
                        {"ctx", sh.ctx},
                        {"kv_dtype", dtype_name(dt)},
                        {"ms", ms},
                        {"bytes", bytes},
                        {"gb_per_s", bytes / ms / 1e6},
                        {"fraction_of_copy", bytes / ms / 1e6 / copy_gbs},
                        {"tflops", flops / ms / 1e9},
                        {"check_max_abs_err", worst.max_abs_err},
                        {"check_max_ref", worst.max_ref},
                        {"check_ok", ok},
                        {"stream_read_gb_per_s", stream_gbs},
                        {"gather_read_gb_per_s", gather_gbs}});
      }
    }
  }
  Json doc = {{"command", command},
              {"git_hash", build_commit()},
              {"device", be.device_description()},
              {"date", utc_now()},
              {"copy_gb_per_s", copy_gbs},
              {"l2_flush_bytes", flush_bytes},
              {"l2_flush", flush_name},
              {"slots", contiguous_slots ? "contiguous" : "shuffled"},
              {"decode_heads", decode_heads == 0 ? std::string("plan") : std::to_string(decode_heads)},
              {"decode_chunk", decode_chunk == 0 ? std::string("plan") : std::to_string(decode_chunk)},
              {"reps", reps},
              {"rows", rows}};
  std::ofstream(out_path) << doc.dump(1) << "\n";
  std::printf("\nwrote %s\n", out_path.c_str());
  bool all_ok = true;
  for (const Json& r : rows)
    if (r.contains("check_ok") && !r["check_ok"].get<bool>()) all_ok = false;
  return all_ok ? 0 : 3;
}

}  // namespace
}  // namespace serve8

int main(int argc, char** argv) {
  try {
    return serve8::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
