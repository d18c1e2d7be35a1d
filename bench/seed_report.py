#!/usr/bin/env python3
"""The seed experiment's table and plot from `scripts/gpu.sh seed`'s JSON lines.

  python3 bench/seed_report.py RESULTS.jsonl [MORE.jsonl ...] [--png PLOT.png] [--copy-gbps GBPS]

Prints a markdown table (one row per model, KV dtype and dataset: req/s, output tok/s, median TTFT
and ITL, pool tokens, peak running requests, decode MBU over all decode steps and over those of
>= 64 rows, and each KV dtype's req/s over the baseline's, the --kv-cache-dtype auto run: bf16 on
the GPU) and the issue's goals, met or not; writes a bar plot of req/s per KV dtype for each model
and dataset (matplotlib, Agg). Several files (one per run) may be given; where a run
appears more than once, the last completed one counts. --copy-gbps rescales the MBU columns to
another copy bandwidth than the one measured in the run (recorded in each line).

--gemm-tflops T adds each bf16-weight run's floor: every step's GEMMs at T TFLOP/s (2 FLOPs per
weight read a token) or its weights at copy speed, whichever is longer, plus its K/V bytes at
copy speed, against the time its steps took (decode steps and steps with prompt tokens apart).
"""
import argparse
import json
import math
import sys

BASELINE = "auto"
# Goals: fp8_e5m2 / bf16 request throughput, per model; decode MBU at batch >= 64.
RATIO_GOALS = {"llama-2-13b": 1.30, "llama-3-8b": 1.10}
MBU_GOAL = 0.80
OK = ("ok", "partial")


def load(paths):
    runs = {}
    order = []
    for path in paths:
        for n, line in enumerate(open(path), 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                print(f"{path}:{n}: not JSON ({e}); skipped", file=sys.stderr)
                continue
            key = (r["model"], r.get("kv_cache_dtype_arg", r.get("kv_cache_dtype")), r["dataset"])
            if key not in runs:
                order.append(key)
            # A completed run replaces anything; a failed or skipped one replaces only another such.
            if r.get("status") in OK or runs.get(key, {}).get("status") not in OK:
                runs[key] = r
    return runs, order


def fmt(x, spec="{:.2f}"):
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else spec.format(x)


def floor_seconds(r, tflops):
    """(decode floor, prompt-step floor) in seconds, or None where the record cannot say."""
    need = ("weight_bytes_read", "copy_gb_per_s", "kv_bytes_per_token", "decode_steps", "mean_decode_kv_tokens",
            "prefill_tokens", "prefill_decode_rows", "prefill_kv_tokens", "output_throughput", "request_throughput",
            "completed", "decode_seconds", "prefill_seconds")
    if any(r.get(k) is None for k in need) or "--quantization none" not in r.get("server_args", ""):
        return None  # FLOPs per token follow from bf16 weights' bytes only
    if not (r["decode_seconds"] > 0 and r["prefill_seconds"] > 0 and r["request_throughput"] > 0):
        return None  # nothing to set a floor against
    # A token's FLOPs equal the bf16 weight bytes a step reads: 2 bytes a weight, 2 FLOPs each.
    copy, flops = r["copy_gb_per_s"] * 1e9, r["weight_bytes_read"]
    rate = tflops * 1e12
    outputs = r["output_throughput"] * r["completed"] / r["request_throughput"]
    rows = (outputs - r["prefill_decode_rows"] - r["completed"]) / max(1, r["decode_steps"])
    step = max(r["weight_bytes_read"] / copy, rows * flops / rate)
    step += r["mean_decode_kv_tokens"] * r["kv_bytes_per_token"] / copy
    prompt = (r["prefill_tokens"] + r["prefill_decode_rows"]) * flops / rate
    prompt += r["prefill_kv_tokens"] * r["kv_bytes_per_token"] / copy
    return step * r["decode_steps"], prompt


def print_floors(runs, order, tflops):
    print(f"\nFloors (GEMMs at {tflops:.0f} TFLOP/s or weights at copy, plus K/V at copy), s:")
    for key in order:
        r = runs[key]
        f = floor_seconds(r, tflops) if r.get("status") in OK else None
        if f is None:
            continue
        dec, pre = f
        took = r["decode_seconds"] + r["prefill_seconds"]
        print(f"- {' '.join(key)}: decode {dec:.1f} of {r['decode_seconds']:.1f} ({dec / r['decode_seconds']:.0%}), "
              f"prompt steps {pre:.1f} of {r['prefill_seconds']:.1f} ({pre / r['prefill_seconds']:.0%}), "
              f"all {dec + pre:.1f} of {took:.1f} ({(dec + pre) / took:.0%})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("jsonl", nargs="+")
    ap.add_argument("--png", default="", help="bar plot of req/s (default: beside the first JSONL file)")
    ap.add_argument("--copy-gbps", type=float, default=None, help="rescale MBU to this copy bandwidth")
    ap.add_argument("--gemm-tflops", type=float, default=None, help="print each run's floor at this GEMM rate")
    a = ap.parse_args()
    runs, order = load(a.jsonl)
    if not runs:
        sys.exit("no runs in " + " ".join(a.jsonl))

    def mbu(r, key):
        v = r.get(key)
        if v is None or a.copy_gbps is None or not r.get("copy_gb_per_s"):
            return v
        return v * r["copy_gb_per_s"] / a.copy_gbps

    def ratio(r):
        base = runs.get((r["model"], BASELINE, r["dataset"]))
        if not base or base.get("status") not in OK or r.get("status") not in OK:
            return None
        if not base.get("request_throughput") or r.get("request_throughput") is None:
            return None
        return r["request_throughput"] / base["request_throughput"]

    copies = sorted({r["copy_gb_per_s"] for r in runs.values() if r.get("copy_gb_per_s")})
    devices = sorted({r.get("device") or "?" for r in runs.values()})
    print(f"Device {', '.join(devices)}; copy bandwidth (read + write) measured in the runs: "
          f"{', '.join(f'{c:.0f}' for c in copies) or '-'} GB/s"
          + (f"; MBU below rescaled to {a.copy_gbps:.0f} GB/s" if a.copy_gbps else "") + "\n")
    print("| model | KV dtype | dataset | req/s | output tok/s | median TTFT (ms) | median ITL (ms) | pool tokens "
          "| peak running | decode MBU | decode MBU, batch >= 64 (steps) | req/s / auto | status |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    # Models and datasets in the order first seen; within them the KV dtypes in the order run.
    models = list(dict.fromkeys(k[0] for k in order))
    datasets = list(dict.fromkeys(k[2] for k in order))
    kvs = list(dict.fromkeys(k[1] for k in order))
    if BASELINE in kvs:
        kvs.remove(BASELINE)
        kvs.insert(0, BASELINE)
    label = {}
    for k in kvs:  # the baseline by the dtype it stood for (bf16 on cuda, fp32 on cpu)
        names = {r.get("kv_cache_dtype") for key, r in runs.items() if key[1] == k and r.get("status") in OK}
        label[k] = f"{k} ({'/'.join(sorted(n for n in names if n))})" if k == BASELINE and names - {None} else k
    for m in models:
        for ds in datasets:
            for k in kvs:
                r = runs.get((m, k, ds))
                if r is None:
                    continue
                ok = r.get("status") in OK
                rat = ratio(r)
                big = mbu(r, "large_decode_mbu")
                big_s = f"{fmt(big, '{:.1%}')} ({r.get('large_decode_steps') or 0})" if ok else "-"
                status = r.get("status", "?") + (f": {r['error']}" if r.get("error") and not ok else "")
                print(f"| {m} | {label[k]} | {ds} | {fmt(r.get('request_throughput')) if ok else '-'} "
                      f"| {fmt(r.get('output_throughput'), '{:,.0f}') if ok else '-'} "
                      f"| {fmt(r.get('median_ttft_ms'), '{:.1f}') if ok else '-'} "
                      f"| {fmt(r.get('median_itl_ms'), '{:.2f}') if ok else '-'} "
                      f"| {fmt(r.get('pool_tokens'), '{:,}')} | {fmt(r.get('peak_running'), '{}')} "
                      f"| {fmt(mbu(r, 'decode_mbu'), '{:.1%}') if ok else '-'} | {big_s} "
                      f"| {fmt(rat, '{:.3f}')} | {status} |")

    print("\nGoals:")
    for m in models:
        goal = RATIO_GOALS.get(m)
        for ds in datasets:
            r = runs.get((m, "fp8_e5m2", ds))
            rat = ratio(r) if r else None
            if goal is None:
                verdict = "no goal for this model"
            elif rat is None:
                verdict = "NOT MEASURED"
            else:
                verdict = "met" if rat >= goal else "NOT MET"
            print(f"- {m}, {ds}: fp8_e5m2 / {label.get(BASELINE, BASELINE)} req/s = {fmt(rat, '{:.3f}')} "
                  f"(goal >= {fmt(goal)}): {verdict}")
    big = [(mbu(r, "large_decode_mbu"), key) for key, r in runs.items()
           if r.get("status") in OK and r.get("large_decode_steps") and mbu(r, "large_decode_mbu") is not None]
    if big:
        lo, hi = min(big), max(big)
        n_met = sum(v >= MBU_GOAL for v, _ in big)
        print(f"- decode MBU at batch >= 64: {fmt(lo[0], '{:.1%}')} ({' '.join(lo[1])}) to {fmt(hi[0], '{:.1%}')} "
              f"({' '.join(hi[1])}); goal >= {MBU_GOAL:.0%}: met in {n_met} of {len(big)} runs")
    else:
        print("- decode MBU at batch >= 64: NOT MEASURED (no run had decode steps of >= 64 rows)")

    if a.gemm_tflops:
        print_floors(runs, order, a.gemm_tflops)

    png = a.png or a.jsonl[0].rsplit(".", 1)[0] + ".png"
    try:
        import matplotlib
    except ImportError:
        print("\nplot: skipped (no matplotlib here); the table above is complete")
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [(m, ds) for m in models for ds in datasets if any((m, k, ds) in runs for k in kvs)]
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(groups)), 4.2))
    width = 0.8 / max(1, len(kvs))
    for i, k in enumerate(kvs):
        xs, ys = [], []
        for g, (m, ds) in enumerate(groups):
            r = runs.get((m, k, ds))
            if r and r.get("status") in OK and r.get("request_throughput") is not None:
                xs.append(g + (i - (len(kvs) - 1) / 2) * width)
                ys.append(r["request_throughput"])
        ax.bar(xs, ys, width, label=label[k])
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.2f}", (x, y), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{m}\n{ds}" for m, ds in groups])
    ax.set_ylabel("request throughput (req/s)")
    ax.set_title(f"serve8 seed experiment: req/s per KV dtype ({', '.join(devices)})")
    ax.legend(title="--kv-cache-dtype")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"\nplot: {png}")


if __name__ == "__main__":
    main()
