// Fuzzes the tokenizer layer's own GGUF reader (tokenizer/gguf_vocab.h, which reads the
// tokenizer.* metadata of a .gguf from its path) and the tokenizer built from what it read: the
// bytes are written to a temporary file, read with read_gguf_vocab, turned into a tokenizer with
// make_gguf_tokenizer, which then encodes and decodes a fixed text. Every step must succeed or
// throw serve8::Error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::string& temp_path() {
  static const std::string path = [] {
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                          : std::filesystem::temp_directory_path();
    return (dir / ("serve8_fuzz_gguf_vocab_" + std::to_string(::getpid()) + ".gguf")).string();
  }();
  return path;
}

struct RemoveAtExit {
  ~RemoveAtExit() { std::remove(temp_path().c_str()); }
} remove_at_exit;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(temp_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const serve8::GgufVocab vocab = serve8::read_gguf_vocab(temp_path());
    const std::unique_ptr<serve8::Tokenizer> tok = serve8::make_gguf_tokenizer(vocab);
    const std::vector<int32_t> ids = tok->encode("Hello wörld <s> 123\n\xff", true);
    (void)tok->decode(ids, true);
    (void)tok->decode(ids, false);
    std::vector<int32_t> all;
    for (int32_t id = 0; id < tok->vocab_size() && id < 512; ++id) all.push_back(id);
    (void)tok->decode(all, false);
  } catch (const serve8::Error&) {
  }
  return 0;
}
