#!/usr/bin/env python3
"""bench/attention's JSON (bench_attention --out) as a PNG and a markdown table.

usage: plot.py RESULTS.json OUT.png > table.md
Decode: fraction of the measured copy bandwidth against context, one panel per head layout, one
line per (batch, KV dtype). Prefill/extend rows go to the table only (TFLOP/s).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"bf16": "-", "fp8_e5m2": "--", "fp8_e4m3": ":"}


def main(path, png):
    doc = json.load(open(path))
    rows = [r for r in doc["rows"] if "ms" in r]
    heads = sorted({r["heads"] for r in rows})
    fig, axes = plt.subplots(2, len(heads), figsize=(7 * len(heads), 9), squeeze=False)
    for col, h in enumerate(heads):
        dec = [r for r in rows if r["heads"] == h and r["kind"] == "decode"]
        ax, ax2 = axes[0][col], axes[1][col]
        for i, b in enumerate(sorted({r["batch"] for r in dec})):
            color = f"C{i}"
            for dt, ls in STYLE.items():
                pts = sorted((r["ctx"], 100 * r["fraction_of_copy"]) for r in dec if r["batch"] == b and r["kv_dtype"] == dt)
                if pts:
                    ax.plot(*zip(*pts), ls, color=color, marker="o", label=f"B={b} {dt}")
            bf16 = {r["ctx"]: r["ms"] for r in dec if r["batch"] == b and r["kv_dtype"] == "bf16"}
            pts = sorted((r["ctx"], r["ms"] / bf16[r["ctx"]]) for r in dec
                         if r["batch"] == b and r["kv_dtype"] == "fp8_e4m3" and r["ctx"] in bf16)
            if pts:
                ax2.plot(*zip(*pts), "-", color=color, marker="o", label=f"B={b}")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 110)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("% of measured copy bandwidth")
        ax.set_title(f"decode, {h}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
        ax2.axhline(0.6, color="k", lw=0.8, ls="--")
        ax2.axhline(0.5, color="gray", lw=0.8, ls=":")
        ax2.set_xscale("log", base=2)
        ax2.set_ylim(0.3, 1.3)
        ax2.set_xlabel("context (tokens)")
        ax2.set_ylabel("fp8_e4m3 time / bf16 time (0.5 = bytes ratio)")
        ax2.set_title(f"decode FP8 speed-up, {h}")
        ax2.grid(alpha=0.3)
        ax2.legend(fontsize=7)
    fig.suptitle(f"{doc['device']}; copy {doc['copy_gb_per_s']:.0f} GB/s; git {doc['git_hash'][:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)

    print(f"`{doc['command']}` on {doc['device']}, {doc['date']} (git {doc['git_hash'][:10]}); "
          f"copy bandwidth {doc['copy_gb_per_s']:.0f} GB/s\n")
    print("| heads | kind | batch | q | ctx | KV | ms | GB/s | % copy | TFLOP/s | fp8 time / bf16 | read ceilings: "
          "stream / gather (% copy) | check |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    bf16 = {(r["heads"], r["kind"], r["batch"], r["ctx"]): r["ms"] for r in rows if r["kv_dtype"] == "bf16"}
    for r in doc["rows"]:
        if "ms" not in r:
            print(f"| {r['heads']} | {r['kind']} | {r['batch']} | {r['q_len']} | {r['ctx']} | - | skipped: {r['skipped']} |"
                  " | | | | | |")
            continue
        base = bf16.get((r["heads"], r["kind"], r["batch"], r["ctx"]))
        ratio = f"{r['ms'] / base:.2f}" if base and r["kv_dtype"] != "bf16" else ""
        ceil = (f"{100 * r['stream_read_gb_per_s'] / doc['copy_gb_per_s']:.0f} / "
                f"{100 * r['gather_read_gb_per_s'] / doc['copy_gb_per_s']:.0f}") if r.get("gather_read_gb_per_s") else ""
        print(f"| {r['heads']} | {r['kind']} | {r['batch']} | {r['q_len']} | {r['ctx']} | {r['kv_dtype']} | "
              f"{r['ms']:.3f} | {r['gb_per_s']:.0f} | {100 * r['fraction_of_copy']:.1f} | {r['tflops']:.1f} | {ratio} | {ceil} | "
              f"{'ok' if r['check_ok'] else 'FAILED'} ({r['check_max_abs_err']:.1e}) |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
