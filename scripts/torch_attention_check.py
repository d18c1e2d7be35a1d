#!/usr/bin/env python3
"""An independent oracle of serve8's paged attention kernels: PyTorch's attention over the dumps.

    scripts/torch_attention_check.py DIR [--tol 1e-2] [--numpy] [--json PATH]

DIR holds what the attention tests write when SERVE8_ATTENTION_DUMP_DIR is set
(tests/backend/attention_dump.h): manifest.json and raw little-endian arrays. For each case the K/V
pools are decoded here, not by serve8 (torch's float8_e4m3fn / float8_e5m2 / bfloat16 / float16
views of the stored bytes), scaled per KV head (value = stored * scale), gathered per sequence by
kv_indices, and attended in float32 with torch.nn.functional.scaled_dot_product_attention: GQA by
repeating each KV head over its group of query heads, and an explicit mask for the causal rule
over a cached prefix (new token i of q_len over kv_len sees the first kv_len - q_len + i + 1).
The backend's output passes when ||out - ref|| / ||ref|| < tol (rel_error of the C++ tests).

Without torch (or with --numpy) the same math runs in numpy, with ml_dtypes decoding the formats.
Prints one line per case and a summary, writes DIR/torch_attention_check.json (or --json), and
exits 1 if any case fails or there is none.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

try:
    import torch
except ImportError:
    torch = None


def load_raw(root, entry):
    path = root / entry["file"]
    raw = np.fromfile(path, dtype=np.uint8)
    return raw, entry["dtype"], tuple(entry["shape"])


class TorchMath:
    def __init__(self, device):
        self.device = torch.device(device)
        # The reference stays fp32 on the GPU too (no TF32 in the score or output products).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
                       "fp8_e5m2": torch.float8_e5m2, "fp8_e4m3": torch.float8_e4m3fn, "int32": torch.int32}
        self.name = f"torch {torch.__version__} on {self.device}"

    def load(self, root, entry):
        raw, dtype, shape = load_raw(root, entry)
        t = torch.from_numpy(raw).to(self.device).view(self.dtypes[dtype]).reshape(shape)
        return t.long() if dtype == "int32" else t.float()

    def attend(self, q, k, v, group, scale):
        """q [L, Hq, D], k/v [N, Hkv, D] float32 -> [L, Hq, D]."""
        n_q, n_kv = q.shape[0], k.shape[0]
        rows = torch.arange(n_q, device=self.device)[:, None]
        cols = torch.arange(n_kv, device=self.device)[None, :]
        mask = cols <= rows + (n_kv - n_q)  # True: attend
        qh = q.permute(1, 0, 2)[None]
        kh = k.permute(1, 0, 2).repeat_interleave(group, dim=0)[None]
        vh = v.permute(1, 0, 2).repeat_interleave(group, dim=0)[None]
        o = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale)
        return o[0].permute(1, 0, 2)

    def to_numpy(self, t):
        return t.double().cpu().numpy()


class NumpyMath:
    def __init__(self):
        import ml_dtypes
        self.dtypes = {"fp32": np.dtype("<f4"), "bf16": ml_dtypes.bfloat16, "fp16": np.dtype("<f2"),
                       "fp8_e5m2": ml_dtypes.float8_e5m2, "fp8_e4m3": ml_dtypes.float8_e4m3fn,
                       "int32": np.dtype("<i4")}
        self.name = f"numpy {np.__version__} (ml_dtypes {ml_dtypes.__version__})"

    def load(self, root, entry):
        raw, dtype, shape = load_raw(root, entry)
        a = raw.view(self.dtypes[dtype]).reshape(shape)
        return a.astype(np.int64) if dtype == "int32" else a.astype(np.float32)

    def attend(self, q, k, v, group, scale):
        n_q, n_kv = q.shape[0], k.shape[0]
        mask = np.arange(n_kv)[None, :] <= np.arange(n_q)[:, None] + (n_kv - n_q)
        kh = np.repeat(k, group, axis=1)
        vh = np.repeat(v, group, axis=1)
        s = np.einsum("lhd,nhd->hln", q, kh) * np.float32(scale)
        s = np.where(mask[None], s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        return np.einsum("hln,nhd->lhd", p, vh).astype(np.float32)

    def to_numpy(self, a):
        return np.asarray(a, dtype=np.float64)


def unpage(p):
    """A pool [pages, Hkv, 16, D] (KvLayer's order) as [slots, Hkv, D]."""
    t = p.permute(0, 2, 1, 3) if hasattr(p, "permute") else p.transpose(0, 2, 1, 3)
    return t.reshape(p.shape[0] * p.shape[2], p.shape[1], p.shape[3])


def check_case(m, root, name, c):
    d, hq, hkv, group = c["d"], c["hq"], c["hkv"], c["group"]
    assert hq == group * hkv, name
    q = m.load(root, c["q"])
    kp = unpage(m.load(root, c["k_pool"]))
    vp = unpage(m.load(root, c["v_pool"]))
    k_scale = m.load(root, c["k_scale"])
    v_scale = m.load(root, c["v_scale"])
    kp = kp * k_scale[None, :, None]
    vp = vp * v_scale[None, :, None]
    qo = [int(x) for x in m.to_numpy(m.load(root, c["qo_indptr"]))]
    kv = [int(x) for x in m.to_numpy(m.load(root, c["kv_indptr"]))]
    idx = m.load(root, c["kv_indices"])
    t = q.shape[0]
    assert q.shape == (t, hq, d) and kp.shape[1:] == (hkv, d), name
    assert qo[0] == 0 and qo[-1] == t and kv[0] == 0 and kv[-1] == idx.shape[0], name
    refs = []
    for b in range(len(qo) - 1):
        sel = idx[kv[b]:kv[b + 1]]
        assert 1 <= qo[b + 1] - qo[b] <= kv[b + 1] - kv[b], f"{name}: sequence {b}"
        refs.append(m.to_numpy(m.attend(q[qo[b]:qo[b + 1]], kp[sel], vp[sel], group, c["softmax_scale"])))
    ref = np.concatenate(refs)
    got = m.to_numpy(m.load(root, c["out"]))
    assert got.shape == ref.shape, name
    diff = got - ref
    # rel_error of tests/backend_cuda/cuda_test_util.h: NaN anywhere fails.
    if np.isnan(got).any() or np.isnan(ref).any():
        rel = math.inf
    else:
        den = float(np.sum(ref * ref))
        rel = math.sqrt(float(np.sum(diff * diff)) / den) if den > 0 else math.sqrt(float(np.sum(diff * diff)))
    absdiff = np.abs(np.nan_to_num(diff, nan=np.inf))
    worst = np.unravel_index(int(np.argmax(absdiff)), absdiff.shape)
    return {"name": name, "rel_error": rel, "max_abs_error": float(absdiff[worst]),
            "worst_token": int(worst[0]), "worst_head": int(worst[1]), "backend": c.get("backend"),
            "kv_dtype": c["k_pool"]["dtype"], "q_dtype": c["q"]["dtype"], "out_dtype": c["out"]["dtype"],
            "d": d, "group": group, "hq": hq, "hkv": hkv, "num_tokens": t, "num_seqs": len(qo) - 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--tol", type=float, default=1e-2, help="relative L2 error bound (default 1e-2)")
    ap.add_argument("--numpy", action="store_true", help="use the numpy path even where torch is present")
    ap.add_argument("--device", help="torch device (default: cuda when available, else cpu)")
    ap.add_argument("--json", type=Path, help="summary path (default DIR/torch_attention_check.json)")
    args = ap.parse_args()

    if torch is not None and not args.numpy:
        m = TorchMath(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    else:
        m = NumpyMath()
    manifest = args.dir / "manifest.json"
    if not manifest.exists():
        print(f"torch_attention_check: no {manifest} (did the tests run with SERVE8_ATTENTION_DUMP_DIR?)")
        return 1
    cases = json.loads(manifest.read_text())["cases"]
    print(f"torch_attention_check: {len(cases)} cases in {args.dir}, reference by {m.name}")
    results = []
    for name in sorted(cases):
        r = check_case(m, args.dir, name, cases[name])
        r["pass"] = r["rel_error"] < args.tol
        results.append(r)
        print(f"{'ok  ' if r['pass'] else 'FAIL'} {name}: rel {r['rel_error']:.3e} max_abs {r['max_abs_error']:.3e}"
              f" (worst token {r['worst_token']} head {r['worst_head']}; T={r['num_tokens']} Hq={r['hq']}"
              f" Hkv={r['hkv']} D={r['d']} kv={r['kv_dtype']} out={r['out_dtype']})", flush=True)

    passed = sum(r["pass"] for r in results)
    worst = max(results, key=lambda r: r["rel_error"], default=None)
    # Strict JSON (for jq): an infinite error (NaN in an output) is written as the string "inf".
    strict = [{k: str(x) if isinstance(x, float) and not math.isfinite(x) else x for k, x in r.items()}
              for r in results]
    summary = {"reference": m.name, "tolerance": args.tol, "passed": passed, "total": len(results),
               "worst": worst and {k: strict[results.index(worst)][k] for k in ("name", "rel_error", "max_abs_error")},
               "cases": strict}
    out = args.json or args.dir / "torch_attention_check.json"
    out.write_text(json.dumps(summary, indent=1, allow_nan=False) + "\n")
    print(f"torch_attention_check: {passed}/{len(results)} cases pass (rel error < {args.tol:g})"
          + (f"; worst {worst['name']}: rel {worst['rel_error']:.3e} max_abs {worst['max_abs_error']:.3e}"
             if worst else "; no cases"))
    return 0 if results and passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
