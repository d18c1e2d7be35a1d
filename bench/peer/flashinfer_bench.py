#!/usr/bin/env python3
"""FlashInfer's paged attention (and PyTorch SDPA for prefill) on bench/attention's grid, timed as
bench_attention times ours, so that bench/peer/compare.py can put the two side by side.

  flashinfer_bench.py [--out FILE] [--reps N] [--quick] [--filter TEXT]... [--spin-us US]
  flashinfer_bench.py --jit-list [--quick] [--filter TEXT]...   the JIT modules the grid needs
  flashinfer_bench.py --jit NAME                                build (JIT-compile) one of them

The same bytes as ours: page size 1 (one token per page, as the engine's pool), each token's page
drawn at random over a pool of exactly the tokens needed (+1: ours keeps slot 0 unused), K and V
as two [pages, 1, Hkv, D] tensors (NHD), bf16 queries, KV in bf16 / fp8_e5m2 / fp8_e4m3. FlashInfer
takes one scale per tensor (k_scale, v_scale in run()), ours one per KV head: e4m3 rows use
k_scale = 0.75, v_scale = 1.25 (non-unit, so the scale path is paid for) and, for decode, are
timed a second time without scales (*_unit_scale_ms): FlashInfer 0.6 applies v_scale != 1 as a
separate `out *= v_scale` kernel after the attention kernel.

Variants per row (each may fail: the error is kept in the row, and the run goes on):
  decode:          fi_cc  BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=False)
                   fi_tc  BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)  (FA2 prefill kernel)
  prefill, extend: fi_fa2 BatchPrefillWithPagedKVCacheWrapper(backend="fa2"), causal
                   fi_fa3 the same with backend="fa3" (bf16 KV only: FA3 takes FP8 KV only with FP8 q)
                   sdpa   torch SDPA (flash / mem-efficient backends) on bf16 K/V already gathered
                          into contiguous tensors and dequantized (the gather is not timed)
Timing as bench_attention: plan() outside the timing; before each rep the L2 is made cold by
reading a buffer of twice its size, then a GPU sleep (torch.cuda._sleep) covers the host's
Python/launch overhead, then CUDA events around run() alone; the median of --reps.
Checks: each variant's output for sample rows (first and last sequence, their last 16 query rows)
against an fp32 reference on the dequantized K/V (max abs error in the row).
Cases whose bf16 KV would pass 48 GiB are skipped as ours skips them.
"""
import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback

import torch

HEADS = [("llama-3-8b (32/8, d128)", 32, 8, 128), ("llama-2-13b (40/40, d128)", 40, 40, 128)]
KV_DTYPES = {"bf16": torch.bfloat16, "fp8_e5m2": torch.float8_e5m2, "fp8_e4m3": torch.float8_e4m3fn}
E4M3_SCALES = (0.75, 1.25)
MAX_KV_BYTES = 48.0 * (1 << 30)
WORKSPACE_BYTES = 256 << 20


def shapes(quick):
    batches = [1, 64] if quick else [1, 16, 64, 256]
    ctxs = [512, 4096] if quick else [512, 2048, 4096, 8192, 32768]
    out = [("decode", b, 1, c) for b in batches for c in ctxs]
    out += [("prefill", 1, c, c) for c in ([2048] if quick else [512, 2048, 8192])]
    out += [("extend", 4, 512, c) for c in ([2048] if quick else [2048, 8192])]
    return out


def label(heads, kind, b, q, c, kv):
    # bench_attention's --filter label: "heads kind B=.. q=.. kv=.. kv_dtype"
    return f"{heads} {kind} B={b} q={q} kv={c} {kv}"


def wanted(lbl, filters):
    return not filters or any(f in lbl for f in filters)


def cases(args):
    for name, hq, hkv, d in HEADS:
        for kind, b, q, c in shapes(args.quick):
            tokens = b * c
            kv_bf16 = float(tokens) * hkv * d * 2 * 2
            dts = [dt for dt in KV_DTYPES if wanted(label(name, kind, b, q, c, dt), args.filter)]
            if not dts:
                continue
            yield (name, hq, hkv, d), (kind, b, q, c), dts, kv_bf16 > MAX_KV_BYTES


# --------------------------------------------------------------------------------------------
# JIT modules: one name per FlashInfer module the grid needs, so run.sh can build them in parallel.

def jit_modules(args):
    mods = []
    for _, (kind, *_), dts, skip in cases(args):
        if skip:
            continue
        for dt in dts:
            names = [f"cc:{dt}", f"fa2:{dt}"] if kind == "decode" else [f"fa2:{dt}"] + ([f"fa3:{dt}"] if dt == "bf16" else [])
            mods += [n for n in names if n not in mods]
    return mods


FAILED_MODULES = {}  # JIT module name -> error: modules not to try again


def module_of(tag, dt):
    """The JIT module a variant needs (tensor-core decode uses the FA2 prefill module)."""
    return {"fi_cc": "cc", "fi_tc": "fa2", "fi_fa2": "fa2", "fi_fa3": "fa3"}.get(tag, tag) + ":" + dt


def build_module(name):
    """Plans (and runs once) a tiny problem with the module `name`, which JIT-compiles it."""
    import flashinfer
    kind, dt = name.split(":")
    kvt = KV_DTYPES[dt]
    dev = "cuda"
    hq, hkv, d, n = 32, 8, 128, 16
    ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    k = torch.randn(n + 1, 1, hkv, d, device=dev).to(kvt)
    v = torch.randn(n + 1, 1, hkv, d, device=dev).to(kvt)
    indptr = torch.tensor([0, n], dtype=torch.int32, device=dev)
    idx = torch.arange(1, n + 1, dtype=torch.int32, device=dev)
    last = torch.ones(1, dtype=torch.int32, device=dev)
    if kind in ("cc", "tc"):
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=kind == "tc")
        w.plan(indptr, idx, last, hq, hkv, d, 1, q_data_type=torch.bfloat16, kv_data_type=kvt)
        q = torch.randn(1, hq, d, device=dev, dtype=torch.bfloat16)
    else:
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=kind)
        w.plan(indptr, indptr, idx, last, hq, hkv, d, 1, causal=True, q_data_type=torch.bfloat16, kv_data_type=kvt)
        q = torch.randn(n, hq, d, device=dev, dtype=torch.bfloat16)
    w.run(q, (k, v))
    torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# Timing

class Timer:
    def __init__(self, reps, spin_us):
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 50 << 20)
        self.flush_bytes = max(2 * l2, 64 << 20)
        self.flush = torch.zeros(self.flush_bytes // 4, dtype=torch.int32, device="cuda")
        self.reps = reps
        # torch.cuda._sleep takes clock cycles: spin_us at the SM clock.
        clock_khz = getattr(props, "clock_rate", 1980000) or 1980000
        self.spin_cycles = int(spin_us * clock_khz / 1000)

    def cold(self):
        self.sink = self.flush.max()  # reads the whole buffer: the L2 is left holding its clean lines

    def median_ms(self, fn):
        fn()  # warm-up (lazy workspaces)
        torch.cuda.synchronize()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        t = []
        for _ in range(self.reps):
            self.cold()
            torch.cuda._sleep(self.spin_cycles)
            a.record()
            fn()
            b.record()
            b.synchronize()
            t.append(a.elapsed_time(b))
        t.sort()
        return t[len(t) // 2]


def fill_random(x):
    """Normal(0, 1) values in x's dtype: one random block (16M elements at most), tiled."""
    flat = x.view(-1)
    n = flat.numel()
    block = min(n, 16 << 20)
    flat[:block] = torch.randn(block, device=x.device, dtype=torch.float32).to(x.dtype)
    done = block
    while done < n:
        m = min(done, n - done)
        flat[done:done + m] = flat[:m]
        done += m


def reference(q_rows, k_seq, v_seq, first_pos, hq, hkv):
    """fp32 attention of q_rows [R, Hq, D] (absolute positions first_pos..) over k/v_seq [L, Hkv, D],
    causal, GQA by repetition."""
    group = hq // hkv
    k = k_seq.float().repeat_interleave(group, dim=1)  # [L, Hq, D]
    v = v_seq.float().repeat_interleave(group, dim=1)
    s = torch.einsum("rhd,lhd->hrl", q_rows.float(), k) / math.sqrt(q_rows.shape[-1])
    pos = torch.arange(q_rows.shape[0], device=q_rows.device) + first_pos
    mask = torch.arange(k.shape[0], device=q_rows.device)[None, :] > pos[:, None]
    s.masked_fill_(mask[None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hrl,lhd->rhd", p, v)


def run_case(timer, heads, shape, dt, gen, args):
    import flashinfer
    name, hq, hkv, d = heads
    kind, batch, q_len, ctx = shape
    dev = "cuda"
    tokens = batch * ctx
    kvt = KV_DTYPES[dt]
    ks, vs = E4M3_SCALES if dt == "fp8_e4m3" else (1.0, 1.0)
    row = {"heads": name, "hq": hq, "hkv": hkv, "head_dim": d, "kind": kind, "batch": batch, "q_len": q_len,
           "ctx": ctx, "kv_dtype": dt, "k_scale": ks, "v_scale": vs}
    esize = 2 if dt == "bf16" else 1
    row["bytes"] = float(tokens) * hkv * d * 2 * esize + 2.0 * batch * q_len * hq * d * 2
    # Pages 1..tokens shuffled (page 0 unused, as ours keeps slot 0), sequence b owns perm[b*ctx:(b+1)*ctx].
    perm = (torch.randperm(tokens, generator=gen) + 1).to(torch.int32)
    indices = perm.to(dev)
    kv_indptr = torch.arange(0, tokens + 1, ctx, dtype=torch.int32, device=dev)
    qo_indptr = torch.arange(0, batch * q_len + 1, q_len, dtype=torch.int32, device=dev)
    last = torch.ones(batch, dtype=torch.int32, device=dev)
    k = torch.empty(tokens + 1, 1, hkv, d, dtype=kvt, device=dev)
    v = torch.empty_like(k)
    fill_random(k)
    fill_random(v)
    q = torch.empty(batch * q_len, hq, d, dtype=torch.bfloat16, device=dev)
    fill_random(q)
    out = torch.empty_like(q)
    ws = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)
    scale_kw = {"k_scale": ks, "v_scale": vs} if dt == "fp8_e4m3" else {}

    # The reference for the sample sequences: the first and the last, their last 16 query rows.
    samples = []
    for b in sorted({0, batch - 1}):
        rows = min(16, q_len)
        seq = perm[b * ctx:(b + 1) * ctx].long().to(dev)
        kk = k[seq, 0].float() * ks
        vv = v[seq, 0].float() * vs
        q0 = b * q_len + q_len - rows
        ref = reference(q[q0:q0 + rows], kk, vv, ctx - rows, hq, hkv)
        samples.append((q0, rows, ref))

    def check(o):
        err = 0.0
        for q0, rows, ref in samples:
            err = max(err, (o[q0:q0 + rows].float() - ref).abs().max().item())
        return err

    def attempt(tag, setup):
        """setup() returns fn, the timed call writing into `out`; errors go into the row. A module
        that failed to build (here or in run.sh's jit step) is not tried again."""
        mod = module_of(tag, dt)
        if mod in FAILED_MODULES:
            row[f"{tag}_error"] = f"not run: module {mod} failed to build: {FAILED_MODULES[mod][:300]}"
            return
        try:
            fn = setup()
        except Exception as e:  # plan(): JIT build or unsupported combination
            msg = str(e)
            if "Ninja" in msg or "nvcc" in msg or "build" in msg.lower():
                FAILED_MODULES[mod] = f"{type(e).__name__}: {e}"[-1000:]
            row[f"{tag}_error"] = f"{type(e).__name__}: {e}"[:4000]
            print(f"  {tag} ({mod}): {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            return
        try:
            out.zero_()
            row[f"{tag}_ms"] = timer.median_ms(fn)
            if hasattr(fn, "finish"):
                fn.finish()
            row[f"{tag}_max_abs_err"] = check(out)
        except Exception as e:  # JIT failure, unsupported combination, ...
            row[f"{tag}_error"] = f"{type(e).__name__}: {e}"[:4000]
            print(f"  {tag}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            if args.verbose:
                traceback.print_exc()

    if kind == "decode":
        for tag, tc in (("fi_cc", False), ("fi_tc", True)):
            def setup(tc=tc):
                w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
                w.plan(kv_indptr, indices, last, hq, hkv, d, 1, q_data_type=torch.bfloat16, kv_data_type=kvt)
                row[f"{tag}_plan_info"] = str(getattr(w, "_plan_info", ""))[:200]
                setup.w = w
                return lambda: w.run(q, (k, v), out=out, **scale_kw)
            attempt(tag, setup)
            if scale_kw and hasattr(setup, "w") and f"{tag}_ms" in row:
                w = setup.w
                try:
                    row[f"{tag}_unit_scale_ms"] = timer.median_ms(lambda: w.run(q, (k, v), out=out))
                except Exception as e:
                    row[f"{tag}_unit_scale_error"] = f"{type(e).__name__}: {e}"[:2000]
    else:
        for tag, backend in (("fi_fa2", "fa2"), ("fi_fa3", "fa3")):
            if backend == "fa3" and dt != "bf16":
                row["fi_fa3_error"] = "not run: FlashInfer's FA3 takes FP8 KV only with an FP8 query"
                continue

            def setup(backend=backend):
                w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
                w.plan(qo_indptr, kv_indptr, indices, last, hq, hkv, d, 1, causal=True,
                       q_data_type=torch.bfloat16, kv_data_type=kvt)
                return lambda: w.run(q, (k, v), out=out, **scale_kw)
            attempt(tag, setup)

        # SDPA on contiguous, dequantized bf16 K/V, heads repeated for GQA; bottom-right causal
        # (the last query row sees the whole context) through causal_lower_right when q < kv.
        def setup_sdpa():
            from torch.nn.attention import SDPBackend, sdpa_kernel
            from torch.nn.functional import scaled_dot_product_attention as sdpa
            seq = perm.long().to(dev).view(batch, ctx)
            group = hq // hkv
            kb = (k[seq, 0].float() * ks).to(torch.bfloat16).repeat_interleave(group, dim=2)  # [B, L, Hq, D]
            vb = (v[seq, 0].float() * vs).to(torch.bfloat16).repeat_interleave(group, dim=2)
            kb = kb.transpose(1, 2).contiguous()
            vb = vb.transpose(1, 2).contiguous()
            qb = q.view(batch, q_len, hq, d).transpose(1, 2).contiguous()
            ob = out.view(batch, q_len, hq, d)
            if q_len == ctx:
                mask, causal = None, True
            else:
                from torch.nn.attention.bias import causal_lower_right
                mask, causal = causal_lower_right(q_len, ctx), False
            backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]

            res = []

            def fn():
                with sdpa_kernel(backends):
                    res[:] = [sdpa(qb, kb, vb, attn_mask=mask, is_causal=causal)]
            fn.finish = lambda: ob.copy_(res[0].transpose(1, 2))  # after the timing
            return fn
        attempt("sdpa", setup_sdpa)

    best = [row[f"{t}_ms"] for t in ("fi_cc", "fi_tc", "fi_fa2", "fi_fa3") if f"{t}_ms" in row]
    if best:
        row["fi_best_ms"] = min(best)
    del k, v, q, out, ws
    return row


def versions():
    v = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
    try:
        import flashinfer
        v["flashinfer"] = flashinfer.__version__
        v["flashinfer_git"] = getattr(flashinfer, "__git_version__", "")
    except Exception as e:
        v["flashinfer"] = f"import failed: {e}"
    try:
        import tvm_ffi
        v["apache_tvm_ffi"] = getattr(tvm_ffi, "__version__", "")
    except Exception:
        pass
    try:
        txt = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
        v["nvcc"] = txt.strip().splitlines()[-1] if txt else ""
    except Exception:
        v["nvcc"] = "not found"
    try:
        v["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                     capture_output=True, text=True).stdout.strip()
    except Exception:
        pass
    p = torch.cuda.get_device_properties(0)
    v["gpu"] = f"{p.name}, sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.1f} GiB"
    v["flashinfer_cuda_arch_list"] = os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "")
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="flashinfer_bench.json")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--filter", action="append", default=[])
    ap.add_argument("--spin-us", type=float, default=200.0, help="GPU sleep before each timed run (hides host overhead)")
    ap.add_argument("--jit-list", action="store_true")
    ap.add_argument("--jit")
    ap.add_argument("--skip-modules", default="", help="JIT modules not to try (comma-separated; failed to build)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    for m in filter(None, args.skip_modules.split(",")):
        FAILED_MODULES[m] = "failed in run.sh's jit step (see its jit_*.log)"
    if args.jit_list:
        print("\n".join(jit_modules(args)))
        return 0
    if args.jit:
        t0 = time.time()
        build_module(args.jit)
        print(f"jit {args.jit}: {time.time() - t0:.1f} s")
        return 0

    timer = Timer(args.reps, args.spin_us)
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    rows = []
    t_start = time.time()
    print(f"{'case':64s} {'cc':>8s} {'tc':>8s} {'fa2':>8s} {'fa3':>8s} {'sdpa':>8s}  max err")
    for heads, shape, dts, skip in cases(args):
        name = heads[0]
        kind, b, q, c = shape
        if skip:
            rows.append({"heads": name, "kind": kind, "batch": b, "q_len": q, "ctx": c, "skipped": "bf16 KV over 48 GiB"})
            continue
        for dt in dts:
            try:
                row = run_case(timer, heads, shape, dt, gen, args)
            except Exception as e:  # allocation, ... : keep the row, go on
                row = {"heads": name, "kind": kind, "batch": b, "q_len": q, "ctx": c, "kv_dtype": dt,
                       "error": f"{type(e).__name__}: {e}"[:4000]}
            torch.cuda.empty_cache()
            rows.append(row)
            cols = " ".join(f"{row[t + '_ms']:8.3f}" if t + "_ms" in row else f"{'-':>8s}"
                            for t in ("fi_cc", "fi_tc", "fi_fa2", "fi_fa3", "sdpa"))
            errs = max([row[k] for k in row if k.endswith("_max_abs_err")] or [float("nan")])
            print(f"{label(name, kind, b, q, c, dt):64s} {cols}  {errs:.1e}", flush=True)
    ver = versions()
    doc = {"tool": "bench/peer/flashinfer_bench.py", "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "versions": ver, "device": ver.get("gpu", ""), "reps": args.reps,
           "l2_flush": "read", "l2_flush_bytes": timer.flush_bytes, "spin_us": args.spin_us, "slots": "shuffled",
           "page_size": 1, "kv_layout": "NHD", "e4m3_scales": {"k": E4M3_SCALES[0], "v": E4M3_SCALES[1]},
           "seconds": round(time.time() - t_start, 1), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {args.out} ({len(rows)} rows, {doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
