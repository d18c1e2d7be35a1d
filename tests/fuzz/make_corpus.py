#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/: a few small valid
inputs each fuzzer starts mutating from. The files are committed; rerun this after changing it.

    python3 tests/fuzz/make_corpus.py    (the GGUF seeds need: pip install gguf numpy)
"""
import json
import pathlib
import shutil
import struct

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] -> a .safetensors file."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    write("fuzz_safetensors", "f32_2x2", safetensors([("w", "F32", [2, 2], f32)], {"format": "pt"}))
    write("fuzz_safetensors", "mixed", safetensors([
        ("a.bf16", "BF16", [3], struct.pack("<3H", 0x3F80, 0xC000, 0x0000)),
        ("b.f16", "F16", [1, 2], struct.pack("<2H", 0x3C00, 0xBC00)),
        ("c.i64", "I64", [1], struct.pack("<q", 7)),
        ("d.scalar", "F32", [], struct.pack("<f", 2.0)),
        ("e.empty", "F32", [0, 4], b""),
    ]))
    write("fuzz_safetensors", "empty_header", safetensors([]))


def gguf_seeds():
    import numpy as np
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFWriter
    from gguf.quants import quantize

    rng = np.random.default_rng(1)
    out = CORPUS / "fuzz_gguf"
    out.mkdir(parents=True, exist_ok=True)

    w = GGUFWriter(str(out / "metadata_only.gguf"), "llama")
    w.add_block_count(2)
    w.add_uint32("u32", 7)
    w.add_int64("i64", -5)
    w.add_float32("f32", 0.25)
    w.add_float64("f64", 1e-6)
    w.add_bool("flag", True)
    w.add_string("s", "héllo")
    w.add_array("words", ["a", "<s>", "▁b"])
    w.add_array("ints", [1, 2, 3])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    w = GGUFWriter(str(out / "tensors.gguf"), "llama")
    w.add_uint32("general.alignment", 32)
    for name, qtype, shape in [("f32", T.F32, (2, 4)), ("f16", T.F16, (1, 8)), ("bf16", T.BF16, (1, 4)),
                               ("q8_0", T.Q8_0, (1, 32)), ("q4_0", T.Q4_0, (1, 32)), ("q4_1", T.Q4_1, (1, 32))]:
        x = rng.standard_normal(shape).astype(np.float32)
        w.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)
    for name, qtype, block_bytes in [("q4_k", T.Q4_K, 144), ("q5_k", T.Q5_K, 176), ("q6_k", T.Q6_K, 210)]:
        raw = rng.integers(0, 256, size=(1, block_bytes), dtype=np.uint8)  # one block of 256 elements
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def request_seeds():
    bodies = {
        "openai_completion": {"model": "m", "prompt": "Hello", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9,
                              "stop": ["\n", "END"], "seed": 42, "stream": False},
        "openai_chat": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 8,
                        "top_k": 40, "min_p": 0.05, "stop_token_ids": [2, 13], "ignore_eos": True,
                        "response_format": {"type": "text"}, "n": 1, "frequency_penalty": 0},
        "sglang_generate": {"text": "The capital", "sampling_params": {
            "temperature": 0, "max_new_tokens": 32, "stop": "x", "skip_special_tokens": False, "sampling_seed": 3,
            "repetition_penalty": 1.0, "regex": None}},
        "sglang_batch": {"input_ids": [[1, 2, 3], [4, 5]], "sampling_params": [
            {"top_k": 1, "max_new_tokens": 16.0}, {"top_p": 0.5, "stop_token_ids": [7]}], "rid": ["a", "b"]},
    }
    for name, body in bodies.items():
        write("fuzz_request_json", name + ".json", json.dumps(body, ensure_ascii=False))


def tokenizer_seeds():
    # The first byte holds the flags (bit 0: add special tokens; bit 1: skip special tokens).
    texts = {
        "ascii": "\x00Hello, world! It's 2024.\n  Indented   spaces\tand tabs.",
        "unicode": "\x01héllo wörld — 日本語のテキスト, emoji 😀👍🏽, Ελληνικά, עברית, ①②③",
        "specials": "\x02<s>[INST] hi [/INST]</s><|begin_of_text|><|eot_id|> <unk>",
        "numbers_code": "\x00def f(x):\n    return x**2 + 12345678901\r\n",
        "combining": "\x03e\u0301 a\u0308 \u1100\u1161\u11a8 \ufeff\u200d",
    }
    for name, text in texts.items():
        write("fuzz_tokenizer", name, text)
    write("fuzz_tokenizer", "bad_utf8", b"\x00abc\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98")


def gguf_vocab_seeds():
    # The small vocabulary GGUFs the tokenizer tests use (written by tests/golden/gen_bpe_golden.py).
    golden = HERE.parent / "golden" / "bpe"
    for name in ("spm_vocab.gguf", "llama3_vocab.gguf"):
        write("fuzz_gguf_vocab", name, (golden / name).read_bytes())


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def regression_seeds():
    """Inputs that once crashed a target (fixed since): kept as seeds, every run replays them."""
    # A tensor of 4 dimensions of 2^39: numel() overflowed int64 (UBSan).
    t = gguf_string("w") + struct.pack("<I", 4) + struct.pack("<4Q", *[1 << 39] * 4) + struct.pack("<IQ", 0, 0)
    write("fuzz_gguf", "regress_dims_overflow", b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + t + b"\0" * 32)
    # A number beyond double in the header: nlohmann's out_of_range escaped instead of serve8::Error.
    h = b'{"a":1e400}'
    write("fuzz_safetensors", "regress_number_overflow", struct.pack("<Q", len(h)) + h)
    # The same in a request body, and a response_format type that is not a string: both escaped
    # as nlohmann exceptions (a 500) instead of a 400.
    write("fuzz_request_json", "regress_number_overflow.json", '{"temperature": 1e400}')
    write("fuzz_request_json", "regress_response_format_type.json", '{"response_format": {"type": 1}}')
    # Arrays nested 6 deep in a key the vocabulary reader skips: it recursed once per 12 bytes
    # without limit (a stack overflow for a file of a few MB); now an error past 4 levels.
    kv = gguf_string("junk") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 6 + struct.pack("<IQ", 0, 0)
    write("fuzz_gguf_vocab", "regress_nested_arrays", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv)
    # A byte piece "<0x-F>": sscanf's %2X read it as -15, and the SentencePiece tokenizer indexed
    # its 256-entry byte table with 4294967281.
    spm = (HERE.parent / "golden" / "bpe" / "spm_vocab.gguf").read_bytes()
    assert b"<0x0F>" in spm
    write("fuzz_gguf_vocab", "regress_signed_byte_piece", spm.replace(b"<0x0F>", b"<0x-F>", 1))


def main():
    for d in ("fuzz_safetensors", "fuzz_gguf", "fuzz_request_json", "fuzz_tokenizer", "fuzz_gguf_vocab"):
        shutil.rmtree(CORPUS / d, ignore_errors=True)
    safetensors_seeds()
    gguf_seeds()
    request_seeds()
    tokenizer_seeds()
    gguf_vocab_seeds()
    regression_seeds()


if __name__ == "__main__":
    main()
