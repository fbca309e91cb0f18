#!/usr/bin/env python3
"""Turn bench/isolation/run.sh's runs.jsonl into a markdown section and a plot.

Usage:
  python3 bench/isolation/report.py runs.jsonl [--clocks clocks.csv] [--markdown docs/benchmarks.md]
                                    [--plot bench/results/<name>.png] [--json summary.json]

Metrics (per system and BE build, median over the repeats, min–max in brackets):
  HP service p50/p99 and response p99, each divided by the same figure of HP alone (native) in
  the same repeat; BE throughput divided by BE alone in the same repeat; system throughput =
  HP requests/s / HP alone requests/s + normalized BE throughput. The section replaces the
  region between <!-- isolation:begin --> and <!-- isolation:end --> (appended if absent).
The plot needs matplotlib; without it the plot is skipped with a message.
"""

import argparse
import json
import statistics
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import markdown_region  # noqa: E402

BEGIN = "<!-- isolation:begin -->"
END = "<!-- isolation:end -->"
SYSTEMS = ["native", "mps", "mps-prio", "tally-passthrough", "tally-priority", "tally-no-gate",
           "tally-no-transforms", "tally-no-stream-priorities"]
LABELS = {
    "native": "two native processes (time-sliced)",
    "mps": "MPS",
    "mps-prio": "MPS, BE at lower client priority",
    "tally-passthrough": "tallyd passthrough",
    "tally-priority": "tallyd priority",
    "tally-no-gate": "tallyd priority − gate",
    "tally-no-transforms": "tallyd priority − transforms",
    "tally-no-stream-priorities": "tallyd priority − stream priorities",
}


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def baseline(rows, repeat, rho, system, build=None):
    for r in rows:
        if r["repeat"] == repeat and r["rho"] == rho and r["system"] == system and (build is None or r["be_build"] == build):
            return r
    return None


def normalized(rows, rho):
    """{(system, build): [per-repeat dicts of normalized metrics]}"""
    out = {}
    for r in rows:
        if r["rho"] != rho or r["system"] in ("hp-alone", "be-alone", "tally-hp-alone") or not r["hp"] or not r["be"]:
            continue
        hp0 = baseline(rows, r["repeat"], rho, "hp-alone")
        be0 = baseline(rows, r["repeat"], rho, "be-alone", r["be_build"])
        if not hp0 or not be0:
            continue
        h, h0 = r["hp"], hp0["hp"]
        be = r["be"]["iterations_per_s"] / be0["be"]["iterations_per_s"]
        hp_rate = (h["requests"] / h["seconds"]) / (h0["requests"] / h0["seconds"])
        out.setdefault((r["system"], r["be_build"]), []).append({
            "p50": h["service_us"]["p50"] / h0["service_us"]["p50"],
            "p99": h["service_us"]["p99"] / h0["service_us"]["p99"],
            "resp_p99": h["response_us"]["p99"] / h0["response_us"]["p99"],
            "be": be,
            "system_tput": hp_rate + be,
        })
    return out


def cell(values, key, digits=2):
    xs = [v[key] for v in values]
    if not xs:
        return "—"
    med = statistics.median(xs)
    return f"{med:.{digits}f} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"


def absolute(rows, rho, system, key):
    xs = [r["hp"][key] for r in rows if r["rho"] == rho and r["system"] == system and r["hp"]]
    return xs


def section(rows, clocks):
    rho = 0.5
    norm = normalized(rows, rho)
    repeats = sorted({r["repeat"] for r in rows if r["rho"] == rho})
    lines = [BEGIN, ""]
    alone = absolute(rows, rho, "hp-alone", "service_us")
    talone = absolute(rows, rho, "tally-hp-alone", "service_us")
    if alone:
        lines.append(f"HP alone (native): service p50 {statistics.median(a['p50'] for a in alone):.0f} µs, "
                     f"p99 {statistics.median(a['p99'] for a in alone):.0f} µs. HP alone through tallyd (no BE): "
                     + (f"p50 {statistics.median(a['p50'] for a in talone):.0f} µs, "
                        f"p99 {statistics.median(a['p99'] for a in talone):.0f} µs." if talone else "not run."))
        lines.append("")
    for build, title in (("ptx", "BE built with PTX (transformable)"), ("sass", "BE built SASS-only (code=sm_90)")):
        lines += [f"**{title}**, ρ = {rho}, {len(repeats)} repeats: median (min–max)", "",
                  "| system | HP service p50 × | HP service p99 × | HP response p99 × | BE throughput × | system throughput |",
                  "|---|---:|---:|---:|---:|---:|"]
        for system in SYSTEMS:
            v = norm.get((system, build), [])
            if not v:
                continue
            lines.append(f"| {LABELS[system]} | {cell(v, 'p50')} | {cell(v, 'p99')} | {cell(v, 'resp_p99')} | "
                         f"{cell(v, 'be')} | {cell(v, 'system_tput')} |")
        lines.append("")
    sweep = sorted({r["rho"] for r in rows if r["rho"] != rho})
    if sweep:
        lines += ["**Load sweep** (BE with PTX, one run each): HP service p99 × and BE throughput ×", "",
                  "| ρ | native p99 × | native BE × | tallyd priority p99 × | tallyd priority BE × |", "|---:|---:|---:|---:|---:|"]
        for x in sweep:
            be_alone = [r for r in rows if r["system"] == "be-alone" and r["be_build"] == "ptx" and r["repeat"] == 1]
            # be-alone was measured at ρ = 0.5 in the same session: reuse it for the sweep.
            fixed = [dict(r, rho=x) for r in be_alone] + [r for r in rows if r["rho"] == x]
            n = normalized(fixed, x)
            nat, pri = n.get(("native", "ptx"), []), n.get(("tally-priority", "ptx"), [])
            lines.append(f"| {x} | {cell(nat, 'p99')} | {cell(nat, 'be')} | {cell(pri, 'p99')} | {cell(pri, 'be')} |")
        lines.append("")
    if clocks:
        lines.append(f"GPU SM clock during the runs: {clocks}.")
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def clock_summary(path):
    if not path:
        return ""
    clocks = []
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) > 1 and parts[1].endswith("MHz") and parts[1][:-4].strip().isdigit():
                clocks.append(int(parts[1][:-4]))
    if not clocks:
        return ""
    busy = [c for c in clocks if c > 1000]
    return (f"{len(clocks)} samples at 1 s, {min(busy or clocks)}–{max(clocks)} MHz while busy "
            f"(median {statistics.median(busy or clocks):.0f} MHz)")


def plot(rows, path):
    plt = markdown_region.pyplot("report.py")
    if plt is None:
        return
    norm = normalized(rows, 0.5)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, build in zip(axes, ("ptx", "sass")):
        for system in SYSTEMS:
            v = norm.get((system, build), [])
            if not v:
                continue
            xs = [x["be"] for x in v]
            ys = [x["p99"] for x in v]
            ax.scatter(xs, ys, label=LABELS[system])
            ax.annotate(system.replace("tally-", ""), (statistics.median(xs), statistics.median(ys)), fontsize=7)
        ax.axhline(1.03, color="red", linestyle="--", linewidth=0.8)
        ax.axvline(0.6, color="red", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("BE throughput (× BE alone)")
        ax.set_title(f"BE {build.upper()}: target = lower right of the red lines")
    axes[0].set_ylabel("HP service p99 (× HP alone)")
    axes[1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs")
    p.add_argument("--clocks")
    p.add_argument("--markdown")
    p.add_argument("--plot")
    a = p.parse_args()
    rows = load(a.runs)
    text = section(rows, clock_summary(a.clocks))
    markdown_region.publish(text, a.markdown, BEGIN, END)
    if a.plot:
        plot(rows, a.plot)


if __name__ == "__main__":
    main()
