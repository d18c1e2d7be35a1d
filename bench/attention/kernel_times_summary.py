#!/usr/bin/env python3
"""Table for bench/attention/kernel_times.sh: per run, the median Nsight Compute duration of one
call's kernels (the warm-up call dropped) against the event-timed median of a run without the
profiler. A call is an attention kernel and the merge kernels after it, as bench/peer/profile_summary.py
groups them (ours: attention_decode_*; FlashInfer's CUDA-core decode BatchDecode* = fi_cc, its
tensor-core decode BatchPrefill* = fi_tc)."""
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "peer"))
from profile_summary import all_launches, parse_raw_csv  # noqa: E402


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
        kernels = parse_raw_csv(stem.with_suffix(".csv").read_text(errors="replace"))
        for variant, calls in all_launches(kernels).items():
            timed = [sum(k["ns"] for k in call) / 1e3 for call in calls[1:]]  # the first call is the warm-up
            k = statistics.median(timed) if timed else None
            e = event_us(stem.with_suffix(".plain.json"), variant)
            diff = None if k is None or e is None else e - k
            print(f"| {setting} | {lab.read_text().strip()} | {variant} | {len(timed)} | {fmt(k)} | {fmt(e)} | {fmt(diff)} |")


if __name__ == "__main__":
    main()
