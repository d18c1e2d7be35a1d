#!/usr/bin/env python3
"""Writes tests/golden/dtype_golden.json: the oracle for serve8's number-format conversions.

Made by ml_dtypes (PyPI), independent of serve8's own code:
    pip install ml_dtypes numpy && python3 tests/golden/gen_dtype_golden.py

- decode: every one of the 256 codes of float8_e5m2 and float8_e4m3fn as an fp32 bit pattern.
- encode: fp32 inputs (random, every rounding tie between neighbouring codes, overflow, subnormals,
  infinities, NaN) and the code each converts to. serve8 saturates FP8 (like PTX cvt.rn.satfinite):
  ml_dtypes does not, so inputs are clipped to +-max first; NaN stays NaN and is checked as "NaN".
- bf16 and fp16 (IEEE, overflow to infinity) on the same inputs.
"""
import json
import pathlib

import ml_dtypes
import numpy as np

FORMATS = {"e5m2": ml_dtypes.float8_e5m2, "e4m3": ml_dtypes.float8_e4m3fn}


def bits(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def inputs():
    rng = np.random.default_rng(20261202)
    xs = list(rng.standard_normal(2000).astype(np.float32) * np.float32(4.0))
    xs += list((rng.standard_normal(500) * 1e4).astype(np.float32))
    xs += list((rng.standard_normal(500) * 1e-5).astype(np.float32))
    xs += list(rng.uniform(-70000, 70000, 300).astype(np.float32))
    # Every midpoint between neighbouring finite codes (exact ties), and one ulp either side.
    for dt in FORMATS.values():
        vals = np.sort(np.unique(np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)))
        vals = vals[np.isfinite(vals)]
        mids = ((vals[:-1].astype(np.float64) + vals[1:].astype(np.float64)) / 2).astype(np.float32)
        for m in mids:
            xs += [m, np.nextafter(m, np.float32(np.inf)), np.nextafter(m, np.float32(-np.inf))]
    # bf16 / fp16 ties too.
    for dt in (ml_dtypes.bfloat16, np.float16):
        codes = np.arange(0, 65536, 97, dtype=np.uint16).view(dt).astype(np.float32)
        codes = np.sort(codes[np.isfinite(codes)])
        mids = ((codes[:-1].astype(np.float64) + codes[1:].astype(np.float64)) / 2).astype(np.float32)
        xs += list(mids[::7])
    specials = [0.0, -0.0, 448.0, 449.0, 464.0, 480.0, 500.0, -1e9, 57344.0, 61440.0, 65504.0, 65520.0,
                1e30, -1e30, 3.4e38, 1e-40, -1e-45, np.inf, -np.inf, np.nan]
    xs += [np.float32(s) for s in specials]
    return np.array(xs, dtype=np.float32)


def main():
    out = {"generator": "tests/golden/gen_dtype_golden.py", "ml_dtypes": ml_dtypes.__version__, "decode": {},
           "encode": []}
    for name, dt in FORMATS.items():
        vals = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
        out["decode"][name] = ["NaN" if np.isnan(v) else bits(v) for v in vals]
    maxes = {name: float(ml_dtypes.finfo(dt).max) for name, dt in FORMATS.items()}
    for x in inputs():
        row = {"x": "NaN" if np.isnan(x) else bits(x)}
        for name, dt in FORMATS.items():
            if np.isnan(x):
                row[name] = "NaN"
            else:
                c = np.clip(x, -maxes[name], maxes[name]).astype(np.float32).astype(dt)
                row[name] = int(np.array(c).view(np.uint8))
        with np.errstate(over="ignore"):
            row["bf16"] = "NaN" if np.isnan(x) else int(np.array(x).astype(ml_dtypes.bfloat16).view(np.uint16))
            row["fp16"] = "NaN" if np.isnan(x) else int(np.array(x).astype(np.float16).view(np.uint16))
        out["encode"].append(row)
    path = pathlib.Path(__file__).with_name("dtype_golden.json")
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {path}: {len(out['encode'])} inputs")


if __name__ == "__main__":
    main()
