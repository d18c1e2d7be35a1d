#include "formats/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"

namespace serve8 {

namespace {

struct TypeInfo {
  uint32_t type;
  const char* name;
  int block;       // elements per block
  int block_size;  // bytes per block
};
constexpr TypeInfo kTypes[] = {{0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},
                               {3, "Q4_1", 32, 20},    {8, "Q8_0", 32, 34},    {12, "Q4_K", 256, 144},
                               {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210}, {30, "BF16", 1, 2}};

const TypeInfo* type_info(uint32_t type) {
  for (const TypeInfo& t : kTypes)
    if (t.type == type) return &t;
  return nullptr;
}

// Sequential reads from the mapped header, each bounds-checked against the file.
class Cursor {
 public:
  Cursor(const uint8_t* base, size_t size, const std::string& path) : base_(base), size_(size), path_(path) {}
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  void need(uint64_t n, const char* what) const {
    SERVE8_CHECK(n <= size_ - pos_, "{}: truncated: {} needs {} bytes at offset {}, the file has {}", path_, what, n,
                 pos_, size_);
  }
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

GgufValue read_value(Cursor& c, uint32_t type, const std::string& path, const std::string& key, int depth) {
  GgufValue v;
  switch (type) {
    case 0:
      v.i = c.read<uint8_t>("a u8 value");
      break;
    case 1:
      v.i = c.read<int8_t>("an i8 value");
      break;
    case 2:
      v.i = c.read<uint16_t>("a u16 value");
      break;
    case 3:
      v.i = c.read<int16_t>("an i16 value");
      break;
    case 4:
      v.i = c.read<uint32_t>("a u32 value");
      break;
    case 5:
      v.i = c.read<int32_t>("an i32 value");
      break;
    case 10:
      v.i = static_cast<int64_t>(c.read<uint64_t>("a u64 value"));
      break;
    case 11:
      v.i = c.read<int64_t>("an i64 value");
      break;
    case 6:
      v.kind = GgufValue::Kind::kFloat;
      v.f = c.read<float>("an f32 value");
      break;
    case 12:
      v.kind = GgufValue::Kind::kFloat;
      v.f = c.read<double>("an f64 value");
      break;
    case 7:
      v.kind = GgufValue::Kind::kBool;
      v.b = c.read<uint8_t>("a bool value") != 0;
      break;
    case 8:
      v.kind = GgufValue::Kind::kString;
      v.s = c.string("a string value");
      break;
    case 9: {
      SERVE8_CHECK(depth < 4, "{}: metadata '{}' nests arrays too deeply", path, key);
      v.kind = GgufValue::Kind::kArray;
      const uint32_t et = c.read<uint32_t>("an array type");
      const uint64_t n = c.read<uint64_t>("an array length");
      SERVE8_CHECK(n < (uint64_t{1} << 32), "{}: metadata '{}' claims {} array elements", path, key, n);
      v.array.reserve(static_cast<size_t>(std::min<uint64_t>(n, 1u << 20)));
      for (uint64_t k = 0; k < n; ++k) v.array.push_back(read_value(c, et, path, key, depth + 1));
      break;
    }
    default:
      fail("{}: metadata '{}' has unknown value type {}", path, key, type);
  }
  return v;
}

}  // namespace

const char* ggml_type_name(uint32_t type) {
  const TypeInfo* t = type_info(type);
  return t ? t->name : "unknown";
}

uint64_t ggml_nbytes(uint32_t type, int64_t n) {
  const TypeInfo* t = type_info(type);
  SERVE8_CHECK(t != nullptr,
               "GGML tensor type {} is not one serve8 reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
               type);
  SERVE8_CHECK(n % t->block == 0, "{} tensors come in blocks of {} elements; {} is not a multiple", t->name, t->block,
               n);
  return static_cast<uint64_t>(n / t->block) * static_cast<uint64_t>(t->block_size);
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string GgufTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = dims.size(); i-- > 0;) s += std::to_string(dims[i]) + (i ? ", " : "");
  return s + "]";
}

GgufFile::GgufFile(const std::string& path, GgufPart part) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  SERVE8_CHECK(fd_ >= 0, "{}: cannot open ({})", path, std::strerror(errno));
  // The destructor does not run when a constructor throws: release the descriptor and the mapping here.
  try {
    struct stat st {};
    SERVE8_CHECK(::fstat(fd_, &st) == 0, "{}: cannot stat", path);
    size_ = static_cast<size_t>(st.st_size);
    SERVE8_CHECK(size_ >= 24, "{}: {} bytes is too short for a GGUF header", path, size_);
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    SERVE8_CHECK(m != MAP_FAILED, "{}: cannot map ({})", path, std::strerror(errno));
    map_ = m;
    parse(static_cast<const uint8_t*>(map_), size_, part);
  } catch (...) {
    if (map_) ::munmap(map_, size_);
    ::close(fd_);
    throw;
  }
}

GgufFile::GgufFile(const uint8_t* bytes, size_t size, const std::string& name, GgufPart part) : path_(name) {
  parse(bytes, size, part);
}

void GgufFile::parse(const uint8_t* base, size_t size, GgufPart part) {
  const std::string& path = path_;
  SERVE8_CHECK(size >= 24, "{}: {} bytes is too short for a GGUF header", path, size);
  SERVE8_CHECK(std::memcmp(base, "GGUF", 4) == 0, "{}: not a GGUF file (bad magic)", path);
  Cursor c(base, size, path_);
  c.read<uint32_t>("the magic");
  version_ = c.read<uint32_t>("the version");
  SERVE8_CHECK(version_ == 2 || version_ == 3, "{}: GGUF version {} (serve8 reads 2 and 3)", path, version_);
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  SERVE8_CHECK(n_tensors < (1u << 24) && n_kv < (1u << 24), "{}: implausible counts ({} tensors, {} metadata)", path,
               n_tensors, n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("a metadata key");
    const uint32_t type = c.read<uint32_t>("a metadata type");
    GgufValue v = read_value(c, type, path, key, 0);
    metadata_[std::move(key)] = std::move(v);
  }
  if (part == GgufPart::kMetadata) return;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.string("a tensor name");
    const uint32_t nd = c.read<uint32_t>("a tensor's dimension count");
    SERVE8_CHECK(nd >= 1 && nd <= 4, "{}: tensor '{}' has {} dimensions", path, t.name, nd);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t v = c.read<uint64_t>("a tensor dimension");
      SERVE8_CHECK(v >= 1 && v < (uint64_t{1} << 40), "{}: tensor '{}' has dimension {}", path, t.name, v);
      // Bounding the element count keeps numel() and the byte size below from overflowing.
      SERVE8_CHECK(numel <= (uint64_t{1} << 50) / v, "{}: tensor '{}' has an absurd element count", path, t.name);
      numel *= v;
      t.dims.push_back(static_cast<int64_t>(v));
    }
    t.type = c.read<uint32_t>("a tensor type");
    t.offset = c.read<uint64_t>("a tensor offset");
    SERVE8_CHECK(type_info(t.type) != nullptr, "{}: tensor '{}' has type {} ({}), which serve8 cannot read", path,
                 t.name, t.type, ggml_type_name(t.type));
    t.nbytes = ggml_nbytes(t.type, t.numel());
    SERVE8_CHECK(index_.emplace(t.name, tensors_.size()).second, "{}: tensor '{}' appears twice", path, t.name);
    tensors_.push_back(std::move(t));
  }
  uint64_t align = 32;
  if (has("general.alignment")) align = static_cast<uint64_t>(get_int("general.alignment"));
  SERVE8_CHECK(align > 0 && (align & (align - 1)) == 0, "{}: general.alignment {} is not a power of two", path, align);
  const uint64_t data_start = (c.pos() + align - 1) / align * align;
  SERVE8_CHECK(data_start <= size, "{}: truncated before the data section", path);
  data_ = base + data_start;
  const uint64_t data_size = size - data_start;
  for (const GgufTensor& t : tensors_) {
    SERVE8_CHECK(t.offset % align == 0, "{}: tensor '{}' at offset {} is not {}-byte aligned", path, t.name, t.offset,
                 align);
    SERVE8_CHECK(t.offset <= data_size && t.nbytes <= data_size - t.offset,
                 "{}: tensor '{}' ({} bytes at offset {}) runs past the end of the data section ({} bytes)", path,
                 t.name, t.nbytes, t.offset, data_size);
  }
}

GgufFile::~GgufFile() {
  if (map_) ::munmap(map_, size_);
  if (fd_ >= 0) ::close(fd_);
}

int64_t GgufFile::get_int(const std::string& key) const {
  auto it = metadata_.find(key);
  SERVE8_CHECK(it != metadata_.end(), "{}: metadata '{}' is missing", path_, key);
  SERVE8_CHECK(it->second.kind == GgufValue::Kind::kInt, "{}: metadata '{}' is not an integer", path_, key);
  return it->second.i;
}

double GgufFile::get_float(const std::string& key) const {
  auto it = metadata_.find(key);
  SERVE8_CHECK(it != metadata_.end(), "{}: metadata '{}' is missing", path_, key);
  if (it->second.kind == GgufValue::Kind::kInt) return static_cast<double>(it->second.i);
  SERVE8_CHECK(it->second.kind == GgufValue::Kind::kFloat, "{}: metadata '{}' is not a number", path_, key);
  return it->second.f;
}

const std::string& GgufFile::get_string(const std::string& key) const {
  auto it = metadata_.find(key);
  SERVE8_CHECK(it != metadata_.end(), "{}: metadata '{}' is missing", path_, key);
  SERVE8_CHECK(it->second.kind == GgufValue::Kind::kString, "{}: metadata '{}' is not a string", path_, key);
  return it->second.s;
}

const std::vector<GgufValue>& GgufFile::get_array(const std::string& key) const {
  auto it = metadata_.find(key);
  SERVE8_CHECK(it != metadata_.end(), "{}: metadata '{}' is missing", path_, key);
  SERVE8_CHECK(it->second.kind == GgufValue::Kind::kArray, "{}: metadata '{}' is not an array", path_, key);
  return it->second.array;
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  auto it = index_.find(name);
  SERVE8_CHECK(it != index_.end(), "{}: no tensor '{}'", path_, name);
  return tensors_[it->second];
}

}  // namespace serve8
