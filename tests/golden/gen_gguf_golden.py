#!/usr/bin/env python3
"""Writes tests/golden/tiny.gguf and tests/golden/tiny_gguf_expected.json with the `gguf` package
(llama.cpp's own Python reader/writer): tensors of every type serve8 dequantizes, quantized by
gguf.quants, and their dequantized values by gguf.quants.dequantize, the oracle of model_gguf_test.

    python3 tests/golden/gen_gguf_golden.py    (pip install gguf numpy)
"""
import json
import pathlib

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.quants import dequantize, quantize

HERE = pathlib.Path(__file__).resolve().parent


def main():
    rng = np.random.default_rng(7)
    w = GGUFWriter(str(HERE / "tiny.gguf"), "llama")
    w.add_block_count(2)
    w.add_context_length(128)
    w.add_float32("tiny.scale", 0.125)
    w.add_bool("tiny.flag", True)
    w.add_array("tiny.words", ["a", "bé", "<s>"])
    expected = {}
    for name, qtype, shape in [("f32", T.F32, (3, 32)), ("f16", T.F16, (2, 32)), ("bf16", T.BF16, (2, 32)),
                               ("q8_0", T.Q8_0, (4, 64)), ("q4_0", T.Q4_0, (2, 64)), ("q4_1", T.Q4_1, (3, 32))]:
        x = (rng.standard_normal(shape) * 2).astype(np.float32)
        x[0, :4] = [0.0, -0.0, 7.5, -3.25]  # zeros and exact values in every type
        raw = quantize(x, qtype)
        w.add_tensor(name, raw, raw_dtype=qtype)
        expected[name] = {"type": int(qtype), "shape": list(shape),
                          "values": [float(v) for v in dequantize(raw, qtype).reshape(-1)]}
    # K-quants: random blocks (gguf.quants cannot quantize to them) with sane f16 scales.
    for name, qtype, block_bytes, scale_at in [("q4_k", T.Q4_K, 144, (0, 2)), ("q5_k", T.Q5_K, 176, (0, 2)),
                                               ("q6_k", T.Q6_K, 210, (208,))]:
        raw = rng.integers(0, 256, size=(2, 2 * block_bytes), dtype=np.uint8)  # 2 rows of 512 elements
        for r in range(2):
            for blk in range(2):
                for at in scale_at:
                    o = blk * block_bytes + at
                    raw[r, o:o + 2] = np.frombuffer(np.float16(rng.uniform(-0.05, 0.05)).tobytes(), dtype=np.uint8)
        w.add_tensor(name, raw, raw_dtype=qtype)
        expected[name] = {"type": int(qtype), "shape": [2, 512],
                          "values": [float(v) for v in dequantize(raw, qtype).reshape(-1)]}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (HERE / "tiny_gguf_expected.json").write_text(json.dumps(expected, indent=0) + "\n")


if __name__ == "__main__":
    main()
