#!/usr/bin/env python3
"""Table for bench/attention/kernel_times.sh: per run, the median Nsight Compute duration of the
decode kernel (the warm-up launch dropped) against bench_attention's event-timed median."""
import csv
import io
import json
import pathlib
import statistics
import sys


def kernel_durations_us(csv_path):
    # ncu --csv --page raw: a header row, a units row, one row per kernel; the application's own
    # output comes before, and no line of it starts with a quote.
    lines = [l for l in csv_path.read_text(errors="replace").splitlines() if l.startswith('"')]
    if len(lines) < 3:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    col = rows[0].index("gpu__time_duration.sum")
    scale = {"ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "nsecond": 1e-3}[rows[1][col]]
    return [float(r[col].replace(",", "")) * scale for r in rows[2:]]


def main():
    out = pathlib.Path(sys.argv[1])
    print("| setting | label | kernels | kernel us (median) | event us (median) | event - kernel us |")
    print("| --- | --- | --- | --- | --- | --- |")
    for lab in sorted(out.glob("run_*.label"), key=lambda p: int(p.stem.split("_")[1])):
        stem = lab.with_suffix("")
        setting = stem.with_suffix(".setting").read_text().strip()
        durations = kernel_durations_us(stem.with_suffix(".csv"))[1:]
        try:
            rows = [r for r in json.loads(stem.with_suffix(".plain.json").read_text())["rows"] if "ms" in r]
            event = rows[0]["ms"] * 1e3 if len(rows) == 1 else None
        except (OSError, ValueError, KeyError):
            event = None
        k = statistics.median(durations) if durations else None
        fmt = lambda x: "" if x is None else f"{x:.2f}"
        diff = None if k is None or event is None else event - k
        print(f"| {setting} | {lab.read_text().strip()} | {len(durations)} | {fmt(k)} | {fmt(event)} | {fmt(diff)} |")


if __name__ == "__main__":
    main()
