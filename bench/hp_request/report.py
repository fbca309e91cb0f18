#!/usr/bin/env python3
"""Report of the HP-request benchmark (bench/hp_request/run.sh).

Reads results.jsonl (one line per run: work_us, mode, service_us/response_us percentiles) and
writes <out>.json, <out>.md (one row per request length and transport: service p50/p99/p99.9 in
us, the ratio of each to native in the same run, the spread of p99 over repeats) and <out>.png
(p99 ratio to native per request length; needs matplotlib, skipped with a message without it).
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

QUANTILES = ("p50", "p99", "p999")


def load(path):
    runs = defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                runs[(d["work_us"], d["mode"])].append(d)
    return runs


def summarize(runs):
    rows = []
    for (work, mode), group in sorted(runs.items()):
        row = {"work_us": work, "mode": mode, "repeats": len(group), "requests": sum(g["requests"] for g in group)}
        for key in ("messages_per_request", "round_trips_per_request"):
            if all(key in g for g in group):
                row[key] = statistics.median(g[key] for g in group)
        for q in QUANTILES:
            values = [g["service_us"][q] for g in group]
            row[q] = statistics.median(values)
            row[q + "_min"], row[q + "_max"] = min(values), max(values)
        rows.append(row)
    native = {r["work_us"]: r for r in rows if r["mode"] == "native"}
    for r in rows:
        base = native.get(r["work_us"])
        for q in QUANTILES:
            r[q + "_vs_native"] = r[q] / base[q] if base and base[q] > 0 else None
    return rows


def markdown(rows):
    out = ["| GPU time / request | transport | service p50 (µs) | p99 (µs) | p99.9 (µs) | p50 × native | p99 × native | p99.9 × native | p99 min–max (µs) | requests | messages / round trips per request |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    fmt = lambda v: "—" if v is None else f"{v:.2f}×"
    for r in rows:
        out.append(f"| {r['work_us']:.0f} µs | {r['mode']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p999']:.1f} | "
                   f"{fmt(r['p50_vs_native'])} | {fmt(r['p99_vs_native'])} | {fmt(r['p999_vs_native'])} | "
                   f"{r['p99_min']:.1f}–{r['p99_max']:.1f} | {r['requests']} | "
                   + (f"{r['messages_per_request']:.1f} / {r['round_trips_per_request']:.2f} |" if "round_trips_per_request" in r else "— |"))
    return "\n".join(out) + "\n"


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report.py: matplotlib not available, no plot", file=sys.stderr)
        return
    works = sorted({r["work_us"] for r in rows})
    modes = [m for m in ("native", "uds", "tcp") if any(r["mode"] == m for r in rows)]
    modes += sorted({r["mode"] for r in rows} - set(modes), key=lambda m: int(m[5:]) if m[5:].isdigit() else 0)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, q in zip(axes, ("p50", "p99")):
        width = 0.8 / len(modes)
        for i, mode in enumerate(modes):
            ys = [next((r[q + "_vs_native"] or 0 for r in rows if r["work_us"] == w and r["mode"] == mode), 0) for w in works]
            ax.bar([x + i * width for x in range(len(works))], ys, width, label=mode)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(works))])
        ax.set_xticklabels([f"{w:.0f} µs" for w in works])
        ax.set_ylabel(f"service {q} × native")
        ax.set_title(f"HP request {q}, same run")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", required=True, help="path prefix for .json/.md/.png")
    args = ap.parse_args()
    rows = summarize(load(args.results))
    if not rows:
        print("report.py: no results", file=sys.stderr)
        return 1
    with open(args.out + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    table = markdown(rows)
    with open(args.out + ".md", "w") as f:
        f.write(table)
    print(table)
    plot(rows, args.out + ".png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
