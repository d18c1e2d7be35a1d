#!/usr/bin/env python3
"""Table for bench/attention/kernel_times.sh: per run, the median Nsight Compute duration of one
call's kernels (the warm-up call dropped) against the event-timed median of a run without the
profiler. FlashInfer's runs time two variants (CUDA cores: BatchDecode..., tensor cores:
BatchPrefill...), each call a main kernel and, when the KV is split, a merge kernel."""
import csv
import io
import json
import pathlib
import statistics
import sys


def kernel_rows(csv_path):
    """(kernel name, microseconds) per profiled kernel. ncu --csv --page raw: a header row, a units
    row, one row per kernel; the application's own output comes before, and no line of it starts
    with a quote."""
    lines = [l for l in csv_path.read_text(errors="replace").splitlines() if l.startswith('"')]
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    col = rows[0].index("gpu__time_duration.sum")
    name = next(i for i, h in enumerate(rows[0]) if h in ("Kernel Name", "Function Name", "Demangled Name"))
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[rows[1][col]]
    return [(r[name], float(r[col].replace(",", "")) * scale) for r in rows[2:]]


def calls_by_variant(kernels):
    """{variant: [call time, ...]}: a call starts at a non-merge kernel; merges add to it."""
    calls = {}
    current = None
    for name, us in kernels:
        if "MergeStates" in name and current is not None:
            calls[current][-1] += us
            continue
        current = "fi_tc" if "BatchPrefill" in name else "fi_cc" if "BatchDecode" in name else "ours"
        calls.setdefault(current, []).append(us)
    return calls


def event_us(plain_json, variant):
    try:
        rows = json.loads(plain_json.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        return None
    key = "ms" if variant == "ours" else f"{variant}_ms"
    found = [r[key] for r in rows if key in r]
    return found[0] * 1e3 if len(found) == 1 else None


def main():
    out = pathlib.Path(sys.argv[1])
    print("| setting | label | kernel | calls | kernels' us (median) | event us (median) | event - kernels us |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    fmt = lambda x: "" if x is None else f"{x:.2f}"
    for lab in sorted(out.glob("run_*.label"), key=lambda p: int(p.stem.split("_")[1])):
        stem = lab.with_suffix("")
        setting = stem.with_suffix(".setting").read_text().strip()
        for variant, calls in calls_by_variant(kernel_rows(stem.with_suffix(".csv"))).items():
            timed = calls[1:]  # the first call is the warm-up
            k = statistics.median(timed) if timed else None
            e = event_us(stem.with_suffix(".plain.json"), variant)
            diff = None if k is None or e is None else e - k
            print(f"| {setting} | {lab.read_text().strip()} | {variant} | {len(timed)} | {fmt(k)} | {fmt(e)} | {fmt(diff)} |")


if __name__ == "__main__":
    main()
