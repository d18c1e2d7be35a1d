#!/usr/bin/env python3
"""Ours (bench_attention --out) against FlashInfer (flashinfer_bench.py --out), shape for shape.

usage: compare.py OURS.json FLASHINFER.json [--png OUT.png] [--md OUT.md]

Joins the rows on (heads, kind, batch, q_len, ctx, kv_dtype) and prints a markdown table: ours,
FlashInfer's decode on CUDA cores (cc) and on tensor cores (tc), its prefill kernels (fa2, fa3),
PyTorch SDPA, and ours / best FlashInfer (< 1: ours is faster). Below it: the FP8 decode shapes
where ours is slower than FlashInfer's best, with what the rows say about them. The PNG: the ratio
against context for decode (one panel per head layout, a line per batch and KV dtype) and a bar
per prefill/extend case.
"""
import argparse
import json
import sys

KEY = ("heads", "kind", "batch", "q_len", "ctx", "kv_dtype")
FI_COLS = (("fi_cc", "FI cc"), ("fi_tc", "FI tc"), ("fi_fa2", "FI fa2"), ("fi_fa3", "FI fa3"), ("sdpa", "SDPA"))


def key(r):
    return tuple(r.get(k) for k in KEY)


def fmt(x, spec=".3f"):
    return format(x, spec) if isinstance(x, (int, float)) else ""


def join(ours, fi):
    fi_rows = {key(r): r for r in fi["rows"] if "kv_dtype" in r}
    out = []
    for r in ours["rows"]:
        if "ms" not in r:
            continue
        f = fi_rows.get(key(r))
        if f is None:
            continue
        best = f.get("fi_best_ms")
        out.append({"ours": r, "fi": f, "ratio": r["ms"] / best if best else None})
    return out


def notes(f):
    n = []
    for tag, _ in FI_COLS:
        if f"{tag}_error" in f and not f[f"{tag}_error"].startswith("not run: FlashInfer's FA3"):
            n.append(f"{tag}: {f[tag + '_error'][:80]}")
    for tag in ("fi_cc", "fi_tc"):
        if f"{tag}_unit_scale_ms" in f:
            n.append(f"{tag} without scales {f[tag + '_unit_scale_ms']:.3f}")
    errs = {t: f[f"{t}_max_abs_err"] for t, _ in FI_COLS if f"{t}_max_abs_err" in f}
    if errs and max(errs.values()) > 2e-2:
        n.append("check: " + ", ".join(f"{t} {e:.1e}" for t, e in errs.items()))
    if "error" in f:
        n.append(f["error"][:80])
    return "; ".join(n)


def table(ours, fi, rows):
    v = fi.get("versions", {})
    lines = [
        f"Ours: `{ours.get('command', '')}` on {ours.get('device', '')}, {ours.get('date', '')} "
        f"(git {str(ours.get('git_hash', ''))[:10]}).",
        f"FlashInfer: `{fi.get('command', '')}`, {fi.get('date', '')}: flashinfer {v.get('flashinfer', '?')}, "
        f"torch {v.get('torch', '?')} (CUDA {v.get('torch_cuda', '?')}), {v.get('nvcc', '')}, "
        f"apache-tvm-ffi {v.get('apache_tvm_ffi', '?')}, {v.get('gpu', '')}, driver {v.get('driver', '?')}.",
        f"Both: page size 1, shuffled slots, L2 made cold by a read before each rep, median of "
        f"{ours.get('reps', '?')} / {fi.get('reps', '?')} reps. Times in ms; ratio = ours / best FlashInfer "
        "(< 1: ours faster). e4m3: ours per-head scales, FlashInfer one k_scale / v_scale.",
        "",
        "| heads | kind | B | q | ctx | KV | ours | " + " | ".join(c for _, c in FI_COLS) + " | ours / best FI | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in FI_COLS) + " | --- | --- |",
    ]
    for j in rows:
        r, f = j["ours"], j["fi"]
        cells = [fmt(f.get(f"{t}_ms")) for t, _ in FI_COLS]
        ratio = f"**{j['ratio']:.2f}**" if j["ratio"] and j["ratio"] > 1.0 else fmt(j["ratio"], ".2f")
        lines.append(f"| {r['heads']} | {r['kind']} | {r['batch']} | {r['q_len']} | {r['ctx']} | {r['kv_dtype']} | "
                     f"{r['ms']:.3f} | " + " | ".join(cells) + f" | {ratio} | {notes(f)} |")
    slow = [j for j in rows if j["ours"]["kind"] == "decode" and j["ours"]["kv_dtype"] != "bf16"
            and j["ratio"] and j["ratio"] > 1.0]
    fp8 = [j for j in rows if j["ours"]["kind"] == "decode" and j["ours"]["kv_dtype"] != "bf16" and j["ratio"]]
    lines += ["", f"FP8 decode: ours at least as fast as FlashInfer's best on {len(fp8) - len(slow)} of {len(fp8)} shapes."]
    for j in slow:
        r, f = j["ours"], j["fi"]
        why = []
        if r.get("gather_read_gb_per_s") and r.get("gb_per_s"):
            why.append(f"ours {r['gb_per_s']:.0f} GB/s vs the gather-read ceiling {r['gather_read_gb_per_s']:.0f} GB/s")
        fi_gbs = r["bytes"] / (f["fi_best_ms"] * 1e6)
        why.append(f"FlashInfer's best {fi_gbs:.0f} GB/s")
        if f.get("fi_cc_plan_info"):
            why.append(f"FI cc plan {f['fi_cc_plan_info'][:60]}")
        lines.append(f"- {r['heads']} B={r['batch']} ctx={r['ctx']} {r['kv_dtype']}: ratio {j['ratio']:.2f}; " + "; ".join(why))
    missing = [r for r in ours["rows"] if "ms" in r and key(r) not in {key(j["ours"]) for j in rows}]
    if missing:
        lines.append(f"\n{len(missing)} of our rows have no FlashInfer row (not in its grid or filtered).")
    return "\n".join(lines)


def plot(rows, png, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    heads = sorted({j["ours"]["heads"] for j in rows})
    # A decode-only run (PEER_FILTER=decode) gets no empty prefill panels.
    n_rows = 2 if any(j["ours"]["kind"] != "decode" and j["ratio"] for j in rows) else 1
    fig, axes = plt.subplots(n_rows, max(1, len(heads)), figsize=(7 * max(1, len(heads)), 4.5 * n_rows),
                             squeeze=False)
    style = {"bf16": "-", "fp8_e5m2": "--", "fp8_e4m3": ":"}
    for col, h in enumerate(heads):
        ax = axes[0][col]
        dec = [j for j in rows if j["ours"]["heads"] == h and j["ours"]["kind"] == "decode" and j["ratio"]]
        for i, b in enumerate(sorted({j["ours"]["batch"] for j in dec})):
            for dt, ls in style.items():
                pts = sorted((j["ours"]["ctx"], j["ratio"]) for j in dec
                             if j["ours"]["batch"] == b and j["ours"]["kv_dtype"] == dt)
                if pts:
                    ax.plot(*zip(*pts), ls, color=f"C{i}", marker="o", label=f"B={b} {dt}")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("ours / best FlashInfer (time; < 1: ours faster)")
        ax.set_title(f"decode, {h}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
        if n_rows == 1:
            continue
        ax2 = axes[1][col]
        pre = [j for j in rows if j["ours"]["heads"] == h and j["ours"]["kind"] != "decode" and j["ratio"]]
        labels = [f"{j['ours']['kind'][:3]} B{j['ours']['batch']}\n{j['ours']['q_len']}/{j['ours']['ctx']}\n"
                  f"{j['ours']['kv_dtype'].replace('fp8_', '')}" for j in pre]
        ax2.bar(range(len(pre)), [j["ratio"] for j in pre],
                color=[f"C{list(style).index(j['ours']['kv_dtype'])}" for j in pre])
        sd = [(i, j["ours"]["ms"] / j["fi"]["sdpa_ms"]) for i, j in enumerate(pre) if j["fi"].get("sdpa_ms")]
        if sd:
            ax2.plot(*zip(*sd), "k_", markersize=14, label="ours / SDPA")
            ax2.legend(fontsize=7)
        ax2.axhline(1.0, color="k", lw=0.8)
        ax2.set_xticks(range(len(pre)))
        ax2.set_xticklabels(labels, fontsize=6)
        ax2.set_ylabel("ours / best FlashInfer (time)")
        ax2.set_title(f"prefill and extend, {h}")
        ax2.grid(alpha=0.3, axis="y")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ours")
    ap.add_argument("flashinfer")
    ap.add_argument("--png")
    ap.add_argument("--md")
    a = ap.parse_args()
    ours = json.load(open(a.ours))
    fi = json.load(open(a.flashinfer))
    rows = join(ours, fi)
    md = table(ours, fi, rows)
    print(md)
    if a.md:
        with open(a.md, "w") as f:
            f.write(md + "\n")
    if a.png:
        v = fi.get("versions", {})
        try:
            import matplotlib  # noqa: F401  (the GPU machine may lack it: then plot here afterwards)
        except ImportError:
            print(f"compare.py: no matplotlib, {a.png} not written", file=sys.stderr)
            return 0 if rows else 1
        plot(rows, a.png, f"ours vs FlashInfer {v.get('flashinfer', '?')} (torch {v.get('torch', '?')}), "
                          f"{ours.get('device', '')}")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
