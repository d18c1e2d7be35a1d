// GGUF (v3), llama.cpp's single-file model format: a memory-mapped reader of the metadata and the
// tensor table, shared by the model loader (formats/gguf_dequant.h turns the tensors into fp32) and
// the tokenizer (tokenizer/gguf_vocab.h reads the tokenizer.* metadata), which is why it sits in
// core. Everything is checked when a file is opened (magic, version, table bounds, tensor extents,
// types of the tensor types serve8 loads: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), so a
// malformed file fails with its name and what is wrong.
//
// Layout: "GGUF", u32 version, u64 tensor count, u64 metadata count; metadata (key string, u32
// type, value); tensor infos (name, u32 n_dims, u64 dims[n_dims] fastest first, u32 type, u64
// offset); then, at the next multiple of general.alignment (32), the data section.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace serve8 {

// A metadata value: one of the scalars, a string, or an array of them.
struct GgufValue {
  enum class Kind { kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  double f = 0.0;
  bool b = false;
  std::string s;
  std::vector<GgufValue> array;
};

// GGML tensor types (ggml.h numbering).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30
};
const char* ggml_type_name(uint32_t type);

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the row length (contiguous)
  uint32_t type = 0;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t nbytes = 0;
  int64_t numel() const;
  std::string shape_str() const;  // in HF order (outermost first): "[49152, 576]"
};

// What to read of a file: everything, or only its metadata (a tokenizer taken from a model file
// whose tensor types serve8 cannot load).
enum class GgufPart { kAll, kMetadata };

class GgufFile {
 public:
  explicit GgufFile(const std::string& path, GgufPart part = GgufPart::kAll);
  // Reads a GGUF file held in memory, with the same checks; `name` stands in for the path in
  // errors. `bytes` must outlive this object (data() points into it).
  GgufFile(const uint8_t* bytes, size_t size, const std::string& name, GgufPart part = GgufPart::kAll);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  bool has(const std::string& key) const { return metadata_.count(key) != 0; }
  // Typed access; throws "<file>: metadata '<key>' is missing" or "... is not a <kind>".
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // ints convert
  const std::string& get_string(const std::string& key) const;
  const std::vector<GgufValue>& get_array(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const GgufTensor& tensor(const std::string& name) const;  // throws "<file>: no tensor '<name>'"
  const uint8_t* data(const GgufTensor& t) const { return data_ + t.offset; }

 private:
  void parse(const uint8_t* base, size_t size, GgufPart part);  // the header, metadata and tensor table

  std::string path_;
  int fd_ = -1;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  const uint8_t* data_ = nullptr;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> index_;
};

// Bytes of n elements of a type (n a multiple of its block size); throws for unknown types.
uint64_t ggml_nbytes(uint32_t type, int64_t n);

}  // namespace serve8
