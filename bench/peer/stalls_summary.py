#!/usr/bin/env python3
"""Table for bench/peer/stalls.sh: one row per Nsight Compute metric (ncu --page details CSV), one
column per report (ours per setting, then FlashInfer's)."""
import csv
import io
import pathlib
import sys


def load(path):
    lines = [l for l in path.read_text(errors="replace").splitlines() if l.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return {}
    h = rows[0]
    s, m, u, v = (h.index(c) for c in ("Section Name", "Metric Name", "Metric Unit", "Metric Value"))
    return {(r[s], r[m]): (r[v], r[u]) for r in rows[1:] if r[m]}


def main():
    d = pathlib.Path(sys.argv[1])
    reports = sorted(d.glob("ours_*.csv"), key=lambda p: int(p.stem.split("_")[1])) + [d / "fi.csv"]
    names = [(p.with_suffix(".setting").read_text().strip() if p.stem != "fi" else "FlashInfer cc") for p in reports]
    data = [load(p) if p.exists() else {} for p in reports]
    keys = []
    for x in data:
        keys += [k for k in x if k not in keys]
    print("| section | metric | unit | " + " | ".join(f"ours {n}" if n != "FlashInfer cc" else n for n in names) + " |")
    print("| --- | --- | --- |" + " --- |" * len(names))
    for k in keys:
        unit = next((x[k][1] for x in data if k in x and x[k][1]), "")
        print(f"| {k[0]} | {k[1]} | {unit} | " + " | ".join(x.get(k, ("", ""))[0] for x in data) + " |")


if __name__ == "__main__":
    main()
