#!/usr/bin/env python3
"""Tables the asynchronous launch rate of bench/launch_rate/run.sh (or any directory of
rate-<mode>-<round>.json files written by `tally_microbench launch_async`).

  report.py DIR [DIR ...] [--markdown FILE] [--json FILE] [--plot FILE]

Per mode: the median µs per launch of every round, the median over rounds, and the rate against
native *in the same round* (the rounds interleave the modes, so a host that slows down between
rounds slows every mode of that round). Several DIRs (e.g. two leases) are pooled by round.
"""
import argparse
import glob
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import markdown_region  # noqa: E402
import microbench_json  # noqa: E402


def load(dirs):
    rounds = {}  # (dir, round) -> {mode: us per launch}
    for d in dirs:
        for path in glob.glob(os.path.join(d, "rate-*-*.json")):
            m = re.match(r"rate-(.+)-(\d+)\.json$", os.path.basename(path))
            if not m:
                continue
            for r in microbench_json.measurements(path):
                if r.get("bench") == "launch_async":
                    rounds.setdefault((d, int(m.group(2))), {})[m.group(1)] = r["median"]
    return rounds


def summarize(rounds):
    modes = sorted({m for r in rounds.values() for m in r}, key=lambda m: (m != "native", m))
    out = {}
    for mode in modes:
        us = [r[mode] for r in rounds.values() if mode in r]
        ratios = [r["native"] / r[mode] for r in rounds.values() if mode in r and "native" in r]
        out[mode] = {"us_per_launch": us, "median_us": statistics.median(us),
                     "rate_vs_native": ratios, "median_rate_vs_native": statistics.median(ratios) if ratios else None,
                     "min_rate_vs_native": min(ratios) if ratios else None,
                     "max_rate_vs_native": max(ratios) if ratios else None}
    return out


def markdown(summary, rounds):
    lines = ["| mode | µs / launch, per round | median µs | rate × native (same round): median (min–max) |",
             "|---|---|---:|---|"]
    for mode, s in summary.items():
        per = ", ".join(f"{x:.2f}" for x in s["us_per_launch"])
        rate = "1.00" if mode == "native" else (
            f"**{s['median_rate_vs_native']:.2f}×** ({s['min_rate_vs_native']:.2f}–{s['max_rate_vs_native']:.2f})")
        lines.append(f"| {mode} | {per} | {s['median_us']:.2f} | {rate} |")
    lines.append(f"\n{len(rounds)} rounds; each value is the median of 5 batches of 100,000 empty-kernel launches.")
    return "\n".join(lines) + "\n"


def plot(summary, path):
    plt = markdown_region.pyplot("report.py")
    if plt is None:
        return
    modes = [m for m in summary if m != "native"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, m in enumerate(modes):
        ys = summary[m]["rate_vs_native"]
        ax.scatter([i] * len(ys), ys, alpha=0.6)
        ax.hlines(summary[m]["median_rate_vs_native"], i - 0.25, i + 0.25, colors="black")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels(modes, fontsize=8)
    ax.set_ylabel("launch rate × native (same round)")
    ax.set_title("Async launch rate through tallyd, H200 host")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dirs", nargs="+")
    p.add_argument("--markdown")
    p.add_argument("--json")
    p.add_argument("--plot")
    a = p.parse_args()
    rounds = load(a.dirs)
    if not rounds:
        sys.exit("report.py: no rate-<mode>-<round>.json files")
    summary = summarize(rounds)
    md = markdown(summary, rounds)
    print(md)
    markdown_region.save(md, {"dirs": a.dirs, "modes": summary}, a.markdown, a.json)
    if a.plot:
        plot(summary, a.plot)


if __name__ == "__main__":
    main()
