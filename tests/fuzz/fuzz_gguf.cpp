// Fuzzes the GGUF reader: the bytes are a whole .gguf file (header, metadata, tensor table, data).
// Opening must either succeed or throw serve8::Error; when it succeeds, every tensor's extent
// must lie inside the buffer, which dequantizing the small ones checks under ASan, and the typed
// metadata getters must answer or throw serve8::Error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "formats/gguf_dequant.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const serve8::GgufFile f(data, size, "fuzz.gguf");
    for (const auto& [key, value] : f.metadata()) {
      try {
        if (value.kind == serve8::GgufValue::Kind::kInt) (void)f.get_int(key);
        (void)f.get_float(key);
      } catch (const serve8::Error&) {
      }
    }
    for (const serve8::GgufTensor& t : f.tensors()) {
      (void)f.tensor(t.name);
      (void)t.shape_str();
      if (t.numel() <= (1 << 16)) (void)dequantize(f, t);
    }
  } catch (const serve8::Error&) {
  }
  return 0;
}
