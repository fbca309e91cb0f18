#!/usr/bin/env python3
"""Turn tally_transform_gpu --bench JSON into a markdown section and a plot.

Usage:
  python3 bench/report/transform_report.py <transform.json> [--markdown docs/benchmarks.md]
                                            [--plot bench/results/<name>.png]

The section replaces the region between <!-- transform:begin --> and <!-- transform:end -->
of the markdown file (appended if absent). Speed = original time / variant time (medians of
20 CUDA-event timings), so 1.0 is the original's speed and > 1 faster. The plot needs
matplotlib; without it the plot is skipped with a message.
"""

import argparse
import json
import sys

import markdown_region  # noqa: E402  (this folder)

BEGIN = "<!-- transform:begin -->"
END = "<!-- transform:end -->"
TARGET = 0.95


def speed(row, key):
    t = row.get(key, {}).get("p50")
    return row["original_us"]["p50"] / t if t else None


def fmt(x, digits=2):
    return "—" if x is None else f"{x:.{digits}f}"


def latency(row, key):
    s = row.get(key, {})
    return "—" if not s.get("n") else f"{s['p50']:.1f} / {s['p99']:.1f} (n={s['n']})"


def section(data):
    rows = data["kernels"]
    lines = [BEGIN, "", "| kernel | blocks | original µs (p10–p90) | sliced ×4 | PTB chunk 1 | PTB best chunk | "
             "retreat latency µs, chunk 1: p50 / p99 |", "|---|---:|---:|---:|---:|---:|---|"]
    best_ok = 0
    for r in rows:
        o = r["original_us"]
        best = max(filter(None, [speed(r, "sliced4_us"), speed(r, "ptb_best_us")]), default=None)
        best_ok += best is not None and best >= TARGET
        chunk = f"{fmt(speed(r, 'ptb_best_us'))} (×{r['ptb_best_chunk']})" if "ptb_best_chunk" in r else "—"
        lines.append(f"| `{r['kernel']}` | {r['blocks']} | {o['p50']:.1f} ({o['p10']:.1f}–{o['p90']:.1f}) | "
                     f"{fmt(speed(r, 'sliced4_us'))} | {fmt(speed(r, 'ptb_us'))} | {chunk} | "
                     f"{latency(r, 'preempt_latency_us')} |")
    lines += ["", f"Best variant (sliced ×4 or PTB at its best chunk) at ≥ {TARGET}× the original: "
              f"**{best_ok} of {len(rows)}** kernels.", "", END]
    return "\n".join(lines)


def plot(data, path):
    plt = markdown_region.pyplot("transform_report.py")
    if plt is None:
        return
    rows = data["kernels"]
    names = [r["kernel"][:22] for r in rows]
    series = [("sliced ×4", "sliced4_us"), ("PTB chunk 1", "ptb_us"), ("PTB best chunk", "ptb_best_us")]
    fig, ax = plt.subplots(figsize=(14, 5))
    width = 0.27
    for i, (label, key) in enumerate(series):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], [speed(r, key) or 0 for r in rows], width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(TARGET, color="red", linewidth=0.8, linestyle="--", label=f"target {TARGET}×")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, rotation=75, fontsize=7)
    ax.set_ylabel("speed vs original (×)")
    ax.set_title(f"Kernel variants on {data.get('device', '?')}: speed relative to the original kernel")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("json")
    p.add_argument("--markdown")
    p.add_argument("--plot")
    a = p.parse_args()
    with open(a.json) as f:
        data = json.load(f)
    text = section(data)
    markdown_region.publish(text, a.markdown, BEGIN, END)
    if a.plot:
        plot(data, a.plot)


if __name__ == "__main__":
    main()
