#include "attention_dump.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"

namespace serve8::test {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void write_file(const fs::path& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  SERVE8_CHECK(f.good(), "cannot write {}", path.string());
}

// Writes an array's bytes to `file` and returns its manifest entry.
json write_array(const fs::path& dir, const std::string& file, DType t, const std::vector<int64_t>& shape,
                 const void* data, size_t n) {
  write_file(dir / file, data, n);
  return {{"file", file}, {"dtype", std::string(dtype_name(t))}, {"shape", shape}};
}

json write_tensor(Backend& be, const fs::path& dir, const std::string& file, const Tensor& t) {
  std::vector<uint8_t> bytes(t.nbytes());
  be.copy_to_host(bytes.data(), t.data, bytes.size());
  return write_array(dir, file, t.dtype, std::vector<int64_t>(t.shape.begin(), t.shape.begin() + t.ndim), bytes.data(),
                     bytes.size());
}

// Pools are most of the dump, and the GQA groups of one head dim and KV dtype share some: files
// named by content are written once.
json write_pool(Backend& be, const fs::path& dir, const std::string& kind, const Tensor& pool) {
  std::vector<uint8_t> bytes(pool.nbytes());
  be.copy_to_host(bytes.data(), pool.data, bytes.size());
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  std::string file = kind;
  file += "_pool_";
  file += fmt::format("{:016x}_{}", h, bytes.size());
  file += ".bin";
  const json entry = {{"file", file},
                      {"dtype", std::string(dtype_name(pool.dtype))},
                      {"shape", {pool.dim(0), pool.dim(1), pool.dim(2), pool.dim(3)}}};
  if (!fs::exists(dir / file)) write_file(dir / file, bytes.data(), bytes.size());
  return entry;
}

json write_ints(const fs::path& dir, const std::string& file, const std::vector<int32_t>& v) {
  return write_array(dir, file, DType::kI32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * 4);
}

}  // namespace

void dump_attention_case(Backend& be, const std::string& name, const Tensor& q, const KvLayer& kv,
                         const DeviceBatch& batch, float softmax_scale, const Tensor& out) {
  const char* env = std::getenv("SERVE8_ATTENTION_DUMP_DIR");
  if (env == nullptr || *env == '\0') return;
  const fs::path dir(env);
  fs::create_directories(dir);
  // ctest runs each test in a process of its own, several at once: one writer at a time keeps
  // every case in the manifest (read, update, replace) and every pool file whole.
  struct Lock {
    int fd;
    ~Lock() { ::close(fd); }  // releases the lock
  } lock{::open((dir / "manifest.lock").c_str(), O_CREAT | O_RDWR, 0644)};
  SERVE8_CHECK(lock.fd >= 0 && ::flock(lock.fd, LOCK_EX) == 0, "cannot lock {}/manifest.lock", dir.string());
  const int64_t hq = q.dim(1), hkv = kv.k.dim(1);
  json c = {{"backend", be.name()},
            {"d", q.dim(2)},
            {"hq", hq},
            {"hkv", hkv},
            {"group", hq / hkv},
            {"num_tokens", q.dim(0)},
            {"num_seqs", batch.num_seqs},
            {"softmax_scale", softmax_scale}};
  c["q"] = write_tensor(be, dir, name + ".q.bin", q);
  c["out"] = write_tensor(be, dir, name + ".out.bin", out);
  c["k_pool"] = write_pool(be, dir, "k", kv.k);
  c["v_pool"] = write_pool(be, dir, "v", kv.v);
  c["k_scale"] = write_tensor(be, dir, name + ".k_scale.bin", kv.k_scale);
  c["v_scale"] = write_tensor(be, dir, name + ".v_scale.bin", kv.v_scale);
  std::vector<int32_t> kv_indices(static_cast<size_t>(batch.kv_indices.numel()));
  be.copy_to_host(kv_indices.data(), batch.kv_indices.data, kv_indices.size() * sizeof(int32_t));
  c["qo_indptr"] = write_ints(dir, name + ".qo_indptr.bin", batch.host->qo_indptr);
  c["kv_indptr"] = write_ints(dir, name + ".kv_indptr.bin", batch.host->kv_indptr);
  c["kv_indices"] = write_ints(dir, name + ".kv_indices.bin", kv_indices);

  // Several runs (test processes, a rerun of one case) share the directory.
  const fs::path manifest = dir / "manifest.json";
  json m = {{"cases", json::object()}};
  if (fs::exists(manifest)) m = json::parse(std::ifstream(manifest));
  m["cases"][name] = c;
  const fs::path tmp = dir / "manifest.json.tmp";
  const std::string text = m.dump(1);
  write_file(tmp, text.data(), text.size());
  fs::rename(tmp, manifest);
}

}  // namespace serve8::test
