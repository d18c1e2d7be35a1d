#!/usr/bin/env python3
"""Tables the profile step of `scripts/gpu.sh peer`: Nsight Compute's counters for each profiled
label, ours and FlashInfer's kernels side by side, so that a shape where ours is slower says where
the time goes.

  profile_summary.py DIR --ncu NCU [--times WORKDIR] [--json OUT]

DIR holds label_<i>.txt and, per side, ours_<i>.ncu-rep / fi_<i>.ncu-rep. A launch is an attention
kernel (ours: attention_decode_*; FlashInfer: BatchDecode* = CUDA-core decode "fi_cc",
BatchPrefill* = tensor-core decode "fi_tc") and the merge kernels that follow it; of each variant
the last launch is kept (the timed rep; the first is the warm-up). --times WORKDIR adds the event
times of the same labels from WORKDIR/attention_bench.json and flashinfer_bench.json (the timed
run, not under the profiler): event time minus the kernels' sum is launch and gap time.
"""
import argparse
import csv
import io
import json
import os
import re
import subprocess
import sys

METRICS = {
    "gpu__time_duration.sum": "ns",
    "dram__bytes_read.sum": "read",
    "dram__bytes_write.sum": "write",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "sm__cycles_active.avg": "sm_active_cycles",
    "sm__cycles_elapsed.avg": "sm_elapsed_cycles",
    "launch__grid_size": "grid",
    "launch__block_size": "block",
    "launch__registers_per_thread": "regs",
}
BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}
TIME = {"nsecond": 1, "usecond": 1e3, "msecond": 1e6, "ns": 1, "us": 1e3, "ms": 1e6}


def kernels(ncu, rep):
    """The report's kernels in launch order: name and the METRICS (bytes in bytes, time in ns)."""
    out = subprocess.run([ncu, "--import", rep, "--csv", "--page", "raw"], capture_output=True, text=True, check=True)
    return parse_raw_csv(out.stdout)


def parse_raw_csv(text):
    """Kernels of `ncu --csv --page raw` output (as kernels()). An application's own output may come
    first; no line of it starts with a quote, and every line of ncu's table does."""
    rows = list(csv.reader(io.StringIO("\n".join(l for l in text.splitlines() if l.startswith('"')))))
    start = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if start is None:
        return []
    head, units, data = rows[start], rows[start + 1], rows[start + 2:]
    res = []
    for r in data:
        if len(r) != len(head):
            continue
        k = {"name": r[head.index("Kernel Name")]}
        for m, key in METRICS.items():
            if m not in head:
                continue
            j = head.index(m)
            v = float(r[j].replace(",", "")) if r[j] not in ("", "n/a") else float("nan")
            v *= BYTES.get(units[j], 1) * TIME.get(units[j], 1)
            k[key] = v
        res.append(k)
    return res


def variant(name):
    if "attention_decode" in name:
        return "ours"
    if "BatchDecode" in name:
        return "fi_cc"
    if "BatchPrefill" in name:
        return "fi_tc"
    return None  # a merge kernel: belongs to the launch before it


def all_launches(ks):
    """{variant: [[kernels of a launch], ...]} in launch order."""
    by_variant, cur = {}, None
    for k in ks:
        v = variant(k["name"])
        if v is not None:
            cur = [k]
            by_variant.setdefault(v, []).append(cur)
        elif cur is not None:
            cur.append(k)
    return by_variant


def launches(ks):
    """{variant: [kernels of its last launch]}"""
    return {v: calls[-1] for v, calls in all_launches(ks).items()}


def short(name):
    name = re.sub(r"\(.*", "", name)
    name = re.sub(r"<.*", "", name)
    return name.split("::")[-1]


def label(r):
    """A JSON row's --filter label (both benchmarks' rows have these fields)."""
    return f"{r['heads']} {r['kind']} B={r['batch']} q={r['q_len']} kv={r['ctx']} {r['kv_dtype']}"


def event_times(workdir):
    """label -> {variant: ms} from the timed (unprofiled) run's JSONs."""
    t = {}
    ours = os.path.join(workdir, "attention_bench.json")
    if os.path.exists(ours):
        for r in json.load(open(ours))["rows"]:
            if "ms" not in r:
                continue  # skipped
            t.setdefault(label(r), {})["ours"] = r["ms"]
    fi = os.path.join(workdir, "flashinfer_bench.json")
    if os.path.exists(fi):
        for r in json.load(open(fi))["rows"]:
            if "kv_dtype" not in r:
                continue  # skipped
            for v in ("fi_cc", "fi_tc"):
                if f"{v}_ms" in r:
                    t.setdefault(label(r), {})[v] = r[f"{v}_ms"]
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--times", help="bench/peer work dir with the timed run's JSONs")
    ap.add_argument("--json", help="write the launches here too")
    ap.add_argument("--ncu-args", default="", help="the extra ncu options the reports were made with")
    a = ap.parse_args()
    times = event_times(a.times) if a.times else {}
    labels = sorted((int(f[6:-4]), open(os.path.join(a.dir, f)).read().strip())
                    for f in os.listdir(a.dir) if re.fullmatch(r"label_\d+\.txt", f))
    caches = "caches as the previous kernel left them" if "--cache-control none" in a.ncu_args else \
        "caches flushed before each kernel"
    opts = f"--clock-control none {a.ncu_args}".strip()
    print(f"Nsight Compute (`{opts}`, {caches}), the last launch of each "
          "variant; `event` is the timed run's CUDA-event time (not under the profiler), `gap` = event - sum of "
          "the kernels (launches and the idle time between them).\n")
    print("| label | variant | kernel | grid x block | regs | us | DRAM MB read | DRAM % peak | SM active % "
          "| occupancy % | event us | gap us |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    dump = []
    for i, lbl in labels:
        for side in ("ours", "fi"):
            rep = os.path.join(a.dir, f"{side}_{i}.ncu-rep")
            if not os.path.exists(rep):
                print(f"| {lbl} | {side} | (no report) | | | | | | | | | |")
                continue
            try:
                ks = kernels(a.ncu, rep)
            except (subprocess.CalledProcessError, StopIteration, ValueError) as e:
                print(f"| {lbl} | {side} | (unreadable: {type(e).__name__}) | | | | | | | | | |")
                continue
            for v, group in sorted(launches(ks).items()):
                total_us = sum(k.get("ns", 0.0) for k in group) / 1e3
                ev = times.get(lbl, {}).get(v)
                for n, k in enumerate(group):
                    active = 100.0 * k.get("sm_active_cycles", 0) / max(k.get("sm_elapsed_cycles", 1), 1)
                    last = n == len(group) - 1
                    ev_s = f"{ev * 1e3:.1f}" if last and ev is not None else ""
                    gap_s = f"{ev * 1e3 - total_us:.1f}" if last and ev is not None else ""
                    print(f"| {lbl} | {v} | {short(k['name'])} | {int(k.get('grid', 0))} x {int(k.get('block', 0))} "
                          f"| {int(k.get('regs', 0))} | {k.get('ns', 0) / 1e3:.1f} | {k.get('read', 0) / 1e6:.2f} "
                          f"| {k.get('dram_pct', 0):.0f} | {active:.0f} | {k.get('occupancy_pct', 0):.0f} "
                          f"| {ev_s} | {gap_s} |")
                dump.append({"label": lbl, "variant": v, "kernels": group, "kernel_sum_us": total_us,
                             "event_ms": ev})
    if a.json:
        json.dump(dump, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
