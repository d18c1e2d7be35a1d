// The safetensors format: a memory-mapped reader, a streaming writer, and the view of an HF model
// directory (one model.safetensors, or shards listed by model.safetensors.index.json).
//
// File layout: 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
// data section; offsets are relative to its start. Everything is checked when a file is opened, so
// a broken file fails at load with its name and the offending tensor, not later as garbage.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace serve8 {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // as the header spells it: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;

  int64_t numel() const;
  std::string shape_str() const;  // "[32000, 4096]"
};

// The serve8 dtype of a safetensors dtype name: F32, BF16, F16 (the ones serve8 reads), or nothing.
std::optional<DType> safetensors_dtype(const std::string& name);
// The safetensors name of a serve8 dtype serve8 writes (F32, BF16, F16); throws for the others.
std::string safetensors_dtype_name(DType t);

// Converts n elements between fp32, bf16 and fp16 (any pair, equal ones copy), in parallel over
// OpenMP threads. src need not be aligned (mapped files place tensors anywhere).
void convert_elements(const void* src, DType from, void* dst, DType to, size_t n);

class SafetensorsFile {
 public:
  // Maps the file and validates its header; throws serve8::Error naming the file (and tensor).
  explicit SafetensorsFile(const std::string& path);
  // Validates a safetensors file held in memory (header, then data), with the same checks; `name`
  // stands in for the path in errors. `bytes` must outlive this object (raw() points into it).
  SafetensorsFile(const uint8_t* bytes, size_t size, const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in header order
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws "<file>: no tensor '<name>'".
  const SafetensorsTensor& tensor(const std::string& name) const;

  // The tensor's dtype if serve8 can read it; otherwise throws naming file, tensor and dtype.
  DType dtype(const SafetensorsTensor& t) const;
  // Throws "<file>: tensor '<name>' has shape [..], expected [..]" unless the shapes are equal.
  void check_shape(const SafetensorsTensor& t, const std::vector<int64_t>& expected) const;
  // The tensor's bytes as stored (mapped; valid while this object lives; maybe unaligned).
  const uint8_t* raw(const SafetensorsTensor& t) const { return data_ + t.offset; }

  // Converts elements [begin, begin + count) of a tensor (flat, row-major) to `to` into out.
  void read(const SafetensorsTensor& t, int64_t begin, int64_t count, DType to, void* out) const;
  // The whole tensor as fp32 (tests and small tensors).
  std::vector<float> read_f32(const std::string& name) const;

 private:
  void parse(const uint8_t* bytes, size_t size);  // the 8-byte length, the header, the data section
  void parse_header(const uint8_t* header, uint64_t length);

  std::string path_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// An HF model directory's weights: <dir>/model.safetensors, or the shards named by
// <dir>/model.safetensors.index.json. A path to a single .safetensors file works too.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);

  const std::string& path() const { return path_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;
  // The file holding the tensor; throws "<dir>: tensor '<name>' is missing" otherwise.
  const SafetensorsFile& file_of(const std::string& name) const;
  const SafetensorsTensor& tensor(const std::string& name) const { return file_of(name).tensor(name); }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string path_;
  std::string source_;  // the file that lists the tensors, named in "missing" errors
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> files_ index
};

// Writes a .safetensors file. Tensors are declared first and their bytes produced one at a time
// by finish(), so a converter never holds more than one tensor in memory. The file appears under
// its name only once complete (written to <path>.tmp, then renamed).
class SafetensorsWriter {
 public:
  // Fills the tensor's bytes (numel * dtype_size) at dst.
  using Fill = std::function<void(void* dst)>;

  explicit SafetensorsWriter(std::string path) : path_(std::move(path)) {}
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // `data` (numel elements of `dtype`) must stay valid until finish().
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  void finish();

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Fill fill;
    uint64_t nbytes;
  };
  std::string path_;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace serve8
