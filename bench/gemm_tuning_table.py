#!/usr/bin/env python3
"""bench/README's --gemm-tuning table from `serve8 bench-one-batch` records (JSON lines).

    python3 bench/gemm_tuning_table.py RECORD.jsonl... > table.md

One row per model, weights, KV dtype and batch, in the order first seen: the median decode step
with each --gemm-tuning mode the records ran (off: bench_gemm's table and the defaults; auto / all:
verdicts timed at start-up), the timed mode's step over off's, and how many decode shapes the
start-up timing gave to serve8's skinny kernel and to cuBLASLt at the batch's own rows (from the
first timed mode's gemm_timings).
"""
import json
import re
import statistics
import sys

from step_table import model_name

MODES = ("off", "auto", "all")


def mode_of(r):
    m = re.search(r"--gemm-tuning[ =](\w+)", r.get("command", ""))
    return m.group(1) if m else "auto"


def main(paths):
    groups, order = {}, []
    for path in paths:
        for line in open(path):
            if not line.strip():
                continue
            r = json.loads(line)
            key = (model_name(r["model_path"]), r.get("weight_dtype", "?"), r["kv_cache_dtype"], r["batch_size"])
            if key not in groups:
                groups[key] = {}
                order.append(key)
            groups[key].setdefault(mode_of(r), []).append(r)
    modes = [m for m in MODES if any(m in g for g in groups.values())]
    timed = [m for m in modes if m != "off"]
    head = "| model, weights, KV | batch | " + " | ".join(f"step, {m} (ms)" for m in modes)
    head += "".join(f" | {m} / off" for m in timed if "off" in modes) + " | shapes timed at the batch's rows: serve8 / cuBLASLt |"
    print(head)
    print("|" + " --- |" * (head.count("|") - 1))
    for key in order:
        g = groups[key]
        step = {m: statistics.median(r["median_decode_latency_s"] * 1e3 for r in g[m]) for m in modes if m in g}
        cells = [f"{step[m]:.2f}" if m in step else "-" for m in modes]
        if "off" in modes:
            cells += [f"{step[m] / step['off']:.3f}" if m in step and "off" in step else "-" for m in timed]
        # The verdicts of the batch's own rows, from the first timed mode that ran it.
        first = next((g[m][0] for m in timed if m in g), {})
        verdicts = [t["chosen"] for t in first.get("gemm_timings", []) if t["rows"] == key[3]]
        cells.append(f"{verdicts.count('serve8')} / {verdicts.count('library')}" if verdicts else "-")
        print(f"| {key[0]}, {key[1]}, {key[2]} | {key[3]} | " + " | ".join(cells) + " |")
    rs = [r for g in groups.values() for rr in g.values() for r in rr]
    print(f"\nserve8 {', '.join(sorted({r.get('git_hash', '?')[:7] for r in rs}))}; "
          f"{', '.join(sorted({r.get('device', '?').split(',')[0] for r in rs}))}")


if __name__ == "__main__":
    main(sys.argv[1:])
