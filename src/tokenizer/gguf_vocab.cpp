#include "tokenizer/gguf_vocab.h"

#include <cstring>
#include <fstream>

#include "core/error.h"

namespace serve8 {
namespace {

// GGUF metadata value types.
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12
};

int fixed_size(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    SERVE8_CHECK(in_, "cannot open GGUF file '{}'", path);
    in_.seekg(0, std::ios::end);
    size_ = static_cast<uint64_t>(in_.tellg());
    in_.seekg(0);
  }

  [[noreturn]] void error(const std::string& what) const { fail("GGUF file '{}': {}", path_, what); }

  void read(void* dst, uint64_t n, const char* what) {
    if (n > remaining() || !in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n))) {
      error(fmt::format("the file ends inside {}", what));
    }
  }
  template <typename T>
  T get(const char* what) {
    T v;
    read(&v, sizeof(v), what);
    return v;
  }
  std::string string(const char* what) {
    const auto n = get<uint64_t>(what);
    if (n > remaining()) error(fmt::format("{} claims {} bytes, more than the file holds", what, n));
    std::string s(n, '\0');
    read(s.data(), n, what);
    return s;
  }
  void skip(uint64_t n, const char* what) {
    if (n > remaining()) error(fmt::format("the file ends inside {}", what));
    in_.seekg(static_cast<std::streamoff>(n), std::ios::cur);
  }
  uint64_t remaining() { return size_ - static_cast<uint64_t>(in_.tellg()); }

 private:
  std::string path_;
  std::ifstream in_;
  uint64_t size_ = 0;
};

// One scalar, as int64 or double; strings and arrays are handled by the caller.
struct Scalar {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
};

Scalar read_scalar(Reader& r, uint32_t type, const char* what) {
  Scalar s;
  switch (type) {
    case kU8:
      s.i = r.get<uint8_t>(what);
      break;
    case kI8:
      s.i = r.get<int8_t>(what);
      break;
    case kBool:
      s.i = r.get<uint8_t>(what) != 0;
      break;
    case kU16:
      s.i = r.get<uint16_t>(what);
      break;
    case kI16:
      s.i = r.get<int16_t>(what);
      break;
    case kU32:
      s.i = r.get<uint32_t>(what);
      break;
    case kI32:
      s.i = r.get<int32_t>(what);
      break;
    case kU64:
      s.i = static_cast<int64_t>(r.get<uint64_t>(what));
      break;
    case kI64:
      s.i = r.get<int64_t>(what);
      break;
    case kF32:
      s.is_float = true;
      s.f = r.get<float>(what);
      break;
    case kF64:
      s.is_float = true;
      s.f = r.get<double>(what);
      break;
    default:
      r.error(fmt::format("{} has the unknown value type {}", what, type));
  }
  return s;
}

// Arrays of arrays nest at most 4 deep (as model/gguf.cpp reads them): a file of nested array
// headers must not recurse once per 12 bytes until the stack runs out.
void skip_value(Reader& r, uint32_t type, const char* what, int depth = 0) {
  if (type == kString) {
    r.skip(r.get<uint64_t>(what), what);
  } else if (type == kArray) {
    if (depth >= 4) r.error(fmt::format("{} nests arrays too deeply", what));
    const auto elem = r.get<uint32_t>(what);
    const auto n = r.get<uint64_t>(what);
    if (const int size = fixed_size(elem); size > 0) {
      if (n > r.remaining() / static_cast<uint64_t>(size)) r.error(fmt::format("{} is longer than the file", what));
      r.skip(n * static_cast<uint64_t>(size), what);
    } else {
      for (uint64_t i = 0; i < n; ++i) skip_value(r, elem, what, depth + 1);
    }
  } else if (fixed_size(type) > 0) {
    r.skip(static_cast<uint64_t>(fixed_size(type)), what);
  } else {
    r.error(fmt::format("{} has the unknown value type {}", what, type));
  }
}

}  // namespace

GgufVocab read_gguf_vocab(const std::string& path) {
  Reader r(path);
  char magic[4];
  r.read(magic, 4, "the header");
  if (std::memcmp(magic, "GGUF", 4) != 0) r.error("it does not start with the GGUF magic");
  const auto version = r.get<uint32_t>("the header");
  if (version != 2 && version != 3) r.error(fmt::format("version {} is not supported (2 or 3)", version));
  r.get<uint64_t>("the header");  // tensor count: the tensors are not read
  const auto num_keys = r.get<uint64_t>("the header");

  GgufVocab vocab;
  vocab.source = path;
  for (uint64_t k = 0; k < num_keys; ++k) {
    const std::string key = r.string("a metadata key");
    const auto type = r.get<uint32_t>(key.c_str());
    const char* what = key.c_str();
    auto expect = [&](bool ok, const char* expected) {
      if (!ok) r.error(fmt::format("metadata '{}' is not {} (value type {})", key, expected, type));
    };
    auto read_int = [&] {
      expect(fixed_size(type) > 0 && type != kF32 && type != kF64, "an integer");
      return read_scalar(r, type, what).i;
    };
    auto read_bool = [&] {
      expect(fixed_size(type) > 0 && type != kF32 && type != kF64, "a bool");
      return read_scalar(r, type, what).i != 0;
    };
    auto read_string = [&] {
      expect(type == kString, "a string");
      return r.string(what);
    };
    auto array_header = [&](const char* expected, auto elem_ok) {
      expect(type == kArray, expected);
      const auto elem = r.get<uint32_t>(what);
      const auto n = r.get<uint64_t>(what);
      if (!elem_ok(elem)) r.error(fmt::format("metadata '{}' is not {} (element type {})", key, expected, elem));
      if (n > r.remaining()) r.error(fmt::format("metadata '{}' claims {} elements, more than the file holds", key, n));
      return std::pair{elem, n};
    };
    auto read_strings = [&] {
      const auto [elem, n] = array_header("an array of strings", [](uint32_t e) { return e == kString; });
      std::vector<std::string> out;
      out.reserve(n);
      for (uint64_t i = 0; i < n; ++i) out.push_back(r.string(what));
      return out;
    };

    if (key == "tokenizer.ggml.model") {
      vocab.model = read_string();
    } else if (key == "tokenizer.ggml.pre") {
      vocab.pre = read_string();
    } else if (key == "tokenizer.ggml.tokens") {
      vocab.tokens = read_strings();
    } else if (key == "tokenizer.ggml.merges") {
      vocab.merges = read_strings();
    } else if (key == "tokenizer.ggml.scores") {
      const auto [elem, n] = array_header("an array of numbers", [](uint32_t e) { return fixed_size(e) > 0; });
      vocab.scores.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        const Scalar s = read_scalar(r, elem, what);
        vocab.scores.push_back(static_cast<float>(s.is_float ? s.f : static_cast<double>(s.i)));
      }
    } else if (key == "tokenizer.ggml.token_type") {
      const auto [elem, n] =
          array_header("an array of integers", [](uint32_t e) { return fixed_size(e) > 0 && e != kF32 && e != kF64; });
      vocab.token_types.reserve(n);
      for (uint64_t i = 0; i < n; ++i) vocab.token_types.push_back(static_cast<int32_t>(read_scalar(r, elem, what).i));
    } else if (key == "tokenizer.ggml.bos_token_id") {
      vocab.bos_id = read_int();
    } else if (key == "tokenizer.ggml.eos_token_id") {
      vocab.eos_id = read_int();
    } else if (key == "tokenizer.ggml.unknown_token_id") {
      vocab.unk_id = read_int();
    } else if (key == "tokenizer.ggml.eot_token_id") {
      vocab.eot_id = read_int();
    } else if (key == "tokenizer.ggml.eom_token_id") {
      vocab.eom_id = read_int();
    } else if (key == "tokenizer.ggml.add_bos_token") {
      vocab.add_bos = read_bool();
    } else if (key == "tokenizer.ggml.add_eos_token") {
      vocab.add_eos = read_bool();
    } else if (key == "tokenizer.ggml.add_space_prefix") {
      vocab.add_space_prefix = read_bool();
    } else if (key == "tokenizer.chat_template") {
      vocab.chat_template = read_string();
    } else {
      skip_value(r, type, what);
    }
  }
  return vocab;
}

}  // namespace serve8
