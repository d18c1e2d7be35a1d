#!/usr/bin/env python3
"""The decode-step table of bench/README from `serve8 bench-one-batch` records (JSON lines).

    python3 bench/step_table.py RECORD.jsonl... > table.md

One row per model, weights, KV dtype, prompt length and batch, in the order first seen: the median
decode step, MBU, and where the records carry a kernel trace (--trace-steps) the GEMM, attention
and other ops' device time a step, the others' share of the busy time; FP8 and int KV rows also
give their step over the bf16 KV step of the same model, weights, prompt and batch. Where a
configuration was run more than once, the median of its steps (and of each class) is taken.
"""
import json
import os
import statistics
import sys


def model_name(path):
    name = os.path.basename(path.rstrip("/"))
    return name[:-5] if name.endswith(".json") else name


def key_of(r):
    return (model_name(r["model_path"]), r.get("weight_dtype", "?"), r["kv_cache_dtype"], r["input_len"], r["batch_size"])


def load(paths):
    groups, order = {}, []
    for path in paths:
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                k = key_of(r)
                if k not in groups:
                    groups[k] = []
                    order.append(k)
                groups[k].append(r)
    return groups, order


def summary(rs):
    med = lambda xs: statistics.median(xs) if xs else None
    out = {
        "step_ms": med([r["median_decode_latency_s"] * 1e3 for r in rs]),
        "mbu": med([r["decode_mbu"] for r in rs if r.get("decode_mbu") is not None]),
        "commits": sorted({r.get("git_hash", "?") for r in rs}),
        "devices": sorted({r.get("device", "?").split(",")[0] for r in rs}),
    }
    traced = [r for r in rs if r.get("kernel_trace_classes_ms_per_step")]
    if traced:
        for c in ("gemm", "attention", "other"):
            out[c] = med([r["kernel_trace_classes_ms_per_step"].get(c, 0.0) for r in traced])
        out["busy"] = med([r["kernel_trace_busy_ms_per_step"] for r in traced])
    return out


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def table(groups, order):
    rows = ["| model, weights, KV | prompt | batch | step (ms) | MBU | GEMM (ms) | attention (ms) | other ops (ms, share of busy) | step / bf16 KV's |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sums = {k: summary(groups[k]) for k in order}
    for k in order:
        model, weights, kv, prompt, batch = k
        s = sums[k]
        base = sums.get((model, weights, "bf16", prompt, batch))
        ratio = s["step_ms"] / base["step_ms"] if base and kv != "bf16" else None
        mbu = "-" if s["mbu"] is None else f"{100 * s['mbu']:.1f}%"
        other = "-"
        if "other" in s:
            other = f"{s['other']:.2f} ({100 * s['other'] / s['busy']:.1f}%)" if s["busy"] else f"{s['other']:.2f}"
        rows.append(
            f"| {model}, {weights}, {kv} | {prompt:,} | {batch} | {s['step_ms']:.2f} | {mbu} | "
            f"{fmt(s.get('gemm'), '.2f')} | {fmt(s.get('attention'), '.2f')} | {other} | {fmt(ratio, '.3f')} |")
    commits = sorted({c for s in sums.values() for c in s["commits"]})
    devices = sorted({d for s in sums.values() for d in s["devices"]})
    return "\n".join(rows) + f"\n\nserve8 {', '.join(commits)}; {', '.join(devices)}\n"


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    groups, order = load(argv[1:])
    if not order:
        print("step_table.py: no records in " + " ".join(argv[1:]), file=sys.stderr)
        return 1
    sys.stdout.write(table(groups, order))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
