// Fuzzes the safetensors reader: the bytes are a whole .safetensors file (8-byte header length,
// JSON header, data section). Opening must either succeed or throw serve8::Error; when it
// succeeds, every tensor's extent must lie inside the buffer, which reading the small ones with
// F32/BF16/F16 dtypes checks under ASan.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const serve8::SafetensorsFile f(data, size, "fuzz.safetensors");
    for (const serve8::SafetensorsTensor& t : f.tensors()) {
      (void)f.tensor(t.name);
      if (!serve8::safetensors_dtype(t.dtype) || t.numel() > (1 << 16)) continue;
      std::vector<float> out(static_cast<size_t>(t.numel()));
      f.read(t, 0, t.numel(), serve8::DType::kF32, out.data());
    }
  } catch (const serve8::Error&) {
  }
  return 0;
}
