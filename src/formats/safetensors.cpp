#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace serve8 {
namespace {

using Json = nlohmann::json;

// A header larger than this is not a real checkpoint; the reference implementation uses the same cap.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// Work below this many elements is not worth waking OpenMP threads for.
constexpr int64_t kParallelThreshold = 1 << 16;

// Element sizes of every dtype the format defines, so sizes are checked even for the ones
// serve8 cannot convert (their tensors fail only if read).
size_t element_size(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},     {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

std::string shape_to_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

template <DType T>
inline float load_as_f32(const uint8_t* p) {
  if constexpr (T == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if constexpr (T == DType::kBF16) return bf16_to_f32(h);
    return f16_to_f32(h);
  }
}

template <DType T>
inline void store_from_f32(float f, uint8_t* p) {
  if constexpr (T == DType::kF32) {
    std::memcpy(p, &f, 4);
  } else {
    const uint16_t h = T == DType::kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
    std::memcpy(p, &h, 2);
  }
}

template <DType From, DType To>
void convert_loop(const uint8_t* src, uint8_t* dst, int64_t n) {
  constexpr size_t kIn = dtype_size(From), kOut = dtype_size(To);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) store_from_f32<To>(load_as_f32<From>(src + i * kIn), dst + i * kOut);
}

template <DType From>
void convert_from(const uint8_t* src, uint8_t* dst, DType to, int64_t n) {
  switch (to) {
    case DType::kF32:
      return convert_loop<From, DType::kF32>(src, dst, n);
    case DType::kBF16:
      return convert_loop<From, DType::kBF16>(src, dst, n);
    case DType::kF16:
      return convert_loop<From, DType::kF16>(src, dst, n);
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      break;
  }
  fail("cannot convert weights to {} (serve8 converts between fp32, bf16 and fp16)", dtype_name(to));
}

void parallel_copy(const uint8_t* src, uint8_t* dst, size_t bytes) {
  constexpr int64_t kChunk = 1 << 22;
  const int64_t chunks = static_cast<int64_t>((bytes + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c * kChunk);
    std::memcpy(dst + begin, src + begin, std::min<size_t>(kChunk, bytes - begin));
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SERVE8_CHECK(in.good(), "{}: cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsTensor::shape_str() const { return shape_to_str(shape); }

std::optional<DType> safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F8_E4M3") return DType::kFP8E4M3;  // FP8 checkpoints' matrices, read as they are
  return std::nullopt;
}

std::string safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kFP8E4M3:
      return "F8_E4M3";  // FP8 checkpoints (`serve8 convert fp8`)
    case DType::kFP8E5M2:
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      break;
  }
  fail("serve8 writes safetensors in F32, BF16, F16 or F8_E4M3, not {}", dtype_name(t));
}

void convert_elements(const void* src, DType from, void* dst, DType to, size_t n) {
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const auto count = static_cast<int64_t>(n);
  if (from == to && from != DType::kI32) return parallel_copy(s, d, n * dtype_size(from));
  switch (from) {
    case DType::kF32:
      return convert_from<DType::kF32>(s, d, to, count);
    case DType::kBF16:
      return convert_from<DType::kBF16>(s, d, to, count);
    case DType::kF16:
      return convert_from<DType::kF16>(s, d, to, count);
    case DType::kFP8E5M2:
    case DType::kFP8E4M3:
    case DType::kI32:
    case DType::kI8:
    case DType::kI4:
      break;
  }
  fail("cannot convert weights from {} (serve8 converts between fp32, bf16 and fp16)", dtype_name(from));
}

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SERVE8_CHECK(fd_ >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  try {
    struct stat st {};
    SERVE8_CHECK(::fstat(fd_, &st) == 0, "{}: cannot stat: {}", path, std::strerror(errno));
    map_size_ = static_cast<size_t>(st.st_size);
    SERVE8_CHECK(map_size_ >= 8, "{}: {} bytes is too short for a safetensors file (8-byte header length first)", path,
                 map_size_);
    void* m = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    SERVE8_CHECK(m != MAP_FAILED, "{}: cannot map {} bytes: {}", path, map_size_, std::strerror(errno));
    map_ = static_cast<uint8_t*>(m);
    parse(map_, map_size_);
  } catch (...) {
    if (map_) ::munmap(map_, map_size_);
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::SafetensorsFile(const uint8_t* bytes, size_t size, const std::string& name) : path_(name) {
  parse(bytes, size);
}

void SafetensorsFile::parse(const uint8_t* bytes, size_t size) {
  SERVE8_CHECK(size >= 8, "{}: {} bytes is too short for a safetensors file (8-byte header length first)", path_, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian on any host
  SERVE8_CHECK(header_len <= size - 8,
               "{}: header length {} runs past the end of the file ({} bytes): not a safetensors file, or truncated",
               path_, header_len, size);
  SERVE8_CHECK(header_len <= kMaxHeaderBytes, "{}: header length {} is over the {}-byte limit", path_, header_len,
               kMaxHeaderBytes);
  data_ = bytes + 8 + header_len;
  data_size_ = size - 8 - header_len;
  parse_header(bytes + 8, header_len);
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::parse_header(const uint8_t* header, uint64_t length) {
  Json j;
  try {
    j = Json::parse(reinterpret_cast<const char*>(header), reinterpret_cast<const char*>(header) + length);
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    fail("{}: the header is not valid JSON: {}", path_, e.what());
  }
  SERVE8_CHECK(j.is_object(), "{}: the header must be a JSON object", path_);
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      SERVE8_CHECK(v.is_object(), "{}: __metadata__ must be an object of strings", path_);
      for (const auto& [k, s] : v.items()) {
        SERVE8_CHECK(s.is_string(), "{}: __metadata__ entry '{}' must be a string", path_, k);
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    SERVE8_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                 "{}: tensor '{}' needs dtype, shape and data_offsets in the header", path_, name);
    SafetensorsTensor t;
    t.name = name;
    const Json& dtype = v.at("dtype");
    SERVE8_CHECK(dtype.is_string(), "{}: tensor '{}' has a dtype that is not a string: {}", path_, name, dtype.dump());
    t.dtype = dtype.get<std::string>();
    const Json& shape = v.at("shape");
    SERVE8_CHECK(shape.is_array(), "{}: tensor '{}' has a shape that is not a list: {}", path_, name, shape.dump());
    uint64_t numel = 1;
    for (const Json& d : shape) {
      SERVE8_CHECK(d.is_number_unsigned() && d.get<uint64_t>() < (1ull << 40), "{}: tensor '{}' has a bad shape {}",
                   path_, name, shape.dump());
      const uint64_t dim = d.get<uint64_t>();
      SERVE8_CHECK(dim == 0 || numel <= (1ull << 50) / dim, "{}: tensor '{}' has an absurd shape {}", path_, name,
                   shape.dump());
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const Json& off = v.at("data_offsets");
    SERVE8_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                 "{}: tensor '{}' has bad data_offsets {}", path_, name, off.dump());
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    SERVE8_CHECK(begin <= end && end <= data_size_,
                 "{}: tensor '{}' has data_offsets [{}, {}] outside the data section of {} bytes (truncated file?)",
                 path_, name, begin, end, data_size_);
    t.offset = begin;
    t.nbytes = end - begin;
    const size_t esize = element_size(t.dtype);
    SERVE8_CHECK(esize == 0 || t.nbytes == numel * esize,
                 "{}: tensor '{}' has {} bytes of data, but shape {} of {} needs {}", path_, name, t.nbytes,
                 t.shape_str(), t.dtype, numel * esize);
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  SERVE8_CHECK(it != index_.end(), "{}: no tensor '{}'", path_, name);
  return tensors_[it->second];
}

DType SafetensorsFile::dtype(const SafetensorsTensor& t) const {
  const std::optional<DType> d = safetensors_dtype(t.dtype);
  SERVE8_CHECK(d.has_value(),
               "{}: tensor '{}' has dtype {}, which serve8 cannot read (it reads F32, BF16, F16 and F8_E4M3)", path_,
               t.name, t.dtype);
  return *d;
}

void SafetensorsFile::check_shape(const SafetensorsTensor& t, const std::vector<int64_t>& expected) const {
  SERVE8_CHECK(t.shape == expected, "{}: tensor '{}' has shape {}, expected {}", path_, t.name, t.shape_str(),
               shape_to_str(expected));
}

void SafetensorsFile::read(const SafetensorsTensor& t, int64_t begin, int64_t count, DType to, void* out) const {
  const DType from = dtype(t);
  SERVE8_CHECK(begin >= 0 && count >= 0 && begin + count <= t.numel(),
               "{}: tensor '{}': elements [{}, {}) are outside its {} elements", path_, t.name, begin, begin + count,
               t.numel());
  convert_elements(raw(t) + static_cast<size_t>(begin) * dtype_size(from), from, out, to, static_cast<size_t>(count));
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsTensor& t = tensor(name);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  read(t, 0, t.numel(), DType::kF32, out.data());
  return out;
}

// ---- SafetensorsCheckpoint ----

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  namespace fs = std::filesystem;
  fs::path single = path, index;
  if (fs::is_directory(path)) {
    single = fs::path(path) / "model.safetensors";
    index = fs::path(path) / "model.safetensors.index.json";
    if (!fs::exists(single)) single.clear();
    SERVE8_CHECK(!single.empty() || fs::exists(index),
                 "{}: no model.safetensors or model.safetensors.index.json in this directory", path);
  } else if (path.size() > 5 && path.ends_with(".json")) {
    index = path;
    single.clear();
  }
  SERVE8_CHECK(!single.empty() || fs::exists(index), "{}: no such file", path);

  if (!single.empty()) {
    source_ = single.string();
    files_.push_back(std::make_unique<SafetensorsFile>(source_));
    for (const SafetensorsTensor& t : files_[0]->tensors()) where_[t.name] = 0;
    return;
  }

  source_ = index.string();
  Json j;
  try {
    j = Json::parse(read_text_file(source_));
  } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    fail("{}: not valid JSON: {}", source_, e.what());
  }
  SERVE8_CHECK(j.is_object() && j.contains("weight_map") && j.at("weight_map").is_object(),
               "{}: expected an object with a 'weight_map' of tensor name to file", source_);
  std::map<std::string, size_t> shard_index;
  for (const auto& [name, file] : j.at("weight_map").items()) {
    SERVE8_CHECK(file.is_string(), "{}: weight_map['{}'] must be a file name", source_, name);
    const std::string shard = file.get<std::string>();
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      const fs::path shard_path = index.parent_path() / shard;
      SERVE8_CHECK(fs::exists(shard_path), "{}: shard '{}' (holding '{}') does not exist", source_, shard, name);
      files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
      it = shard_index.emplace(shard, files_.size() - 1).first;
    }
    SERVE8_CHECK(files_[it->second]->contains(name), "{}: weight_map puts tensor '{}' in {}, which has no such tensor",
                 source_, name, files_[it->second]->path());
    where_[name] = it->second;
  }
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  const auto it = where_.find(name);
  SERVE8_CHECK(it != where_.end(), "{}: tensor '{}' is missing (not in {})", path_, name, source_);
  return *files_[it->second];
}

// ---- SafetensorsWriter ----

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data) {
  add(name, dtype, std::move(shape), Fill());
  Entry& e = entries_.back();
  e.fill = [data, n = e.nbytes](void* dst) {
    parallel_copy(static_cast<const uint8_t*>(data), static_cast<uint8_t*>(dst), n);
  };
}

void SafetensorsWriter::add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill) {
  SERVE8_CHECK(!name.empty() && name != "__metadata__", "{}: bad tensor name '{}'", path_, name);
  for (const Entry& e : entries_) SERVE8_CHECK(e.name != name, "{}: tensor '{}' added twice", path_, name);
  safetensors_dtype_name(dtype);  // throws for dtypes the writer does not write
  uint64_t numel = 1;
  for (int64_t d : shape) {
    SERVE8_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension", path_, name);
    numel *= static_cast<uint64_t>(d);
  }
  entries_.push_back(Entry{name, dtype, std::move(shape), std::move(fill), numel * dtype_size(dtype)});
}

void SafetensorsWriter::finish() {
  Json header = Json::object();
  std::map<std::string, std::string> metadata = metadata_;
  // transformers refuses a checkpoint whose metadata lacks the framework it was saved from.
  if (!metadata.count("format")) metadata["format"] = "pt";
  header["__metadata__"] = metadata;
  uint64_t offset = 0, max_bytes = 0;
  for (const Entry& e : entries_) {
    header[e.name] = {
        {"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.nbytes}}};
    offset += e.nbytes;
    max_bytes = std::max(max_bytes, e.nbytes);
  }
  std::string text = header.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  SERVE8_CHECK(f != nullptr, "{}: cannot create: {}", tmp, std::strerror(errno));
  bool ok = true;
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  ok = ok && std::fwrite(len_bytes, 1, 8, f) == 8;
  ok = ok && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  std::vector<uint8_t> buf;
  try {
    buf.resize(static_cast<size_t>(max_bytes));
    for (const Entry& e : entries_) {
      if (!ok) break;
      if (e.nbytes == 0) continue;
      e.fill(buf.data());
      ok = std::fwrite(buf.data(), 1, e.nbytes, f) == e.nbytes;
    }
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail("{}: write failed: {}", tmp, std::strerror(err));
  }
  SERVE8_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "{}: cannot rename to {}: {}", tmp, path_,
               std::strerror(errno));
}

}  // namespace serve8
