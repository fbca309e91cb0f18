#!/usr/bin/env python3
"""Tables bench/be_alone/run.sh's be-alone.txt: per BE shape and system, iterations per second
of every round and the ratio to native *in the same round* (the rounds interleave the systems).

  report.py be-alone.txt [--label system=text ...] [--markdown FILE] [--json FILE] [--plot FILE]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import markdown_region  # noqa: E402


def load(path):
    runs = {}  # (shape, round) -> {system: iterations per second}
    with open(path) as f:
        for line in f:
            parts = line.split(" ", 3)
            if len(parts) < 4 or not parts[3].strip().startswith("{"):
                continue
            shape, system, rnd, result = parts
            runs.setdefault((shape, rnd), {})[system] = json.loads(result)["iterations_per_s"]
    return runs


def summarize(runs):
    out = {}  # shape -> system -> {"rate": [...], "ratio": [...]}
    for (shape, _), systems in sorted(runs.items()):
        native = systems.get("native")
        for system, rate in systems.items():
            entry = out.setdefault(shape, {}).setdefault(system, {"rate": [], "ratio": []})
            entry["rate"].append(rate)
            if native:
                entry["ratio"].append(rate / native)
    return out


def markdown(summary, labels):
    lines = ["| BE shape | system | iterations/s, median (min–max) | × native, median (min–max) |",
             "|---|---|---:|---:|"]
    for shape, systems in summary.items():
        for system, e in systems.items():
            r, x = e["rate"], e["ratio"]
            lines.append(f"| {shape} | {labels.get(system, system)} | {statistics.median(r):.1f} ({min(r):.1f}–{max(r):.1f}) "
                         f"| {statistics.median(x):.3f} ({min(x):.3f}–{max(x):.3f}) |")
    return "\n".join(lines) + "\n"


def plot(summary, labels, path):
    plt = markdown_region.pyplot("report.py")
    if plt is None:
        return
    shapes = list(summary)
    systems = [s for s in next(iter(summary.values())) if s != "native"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        medians = [statistics.median(summary[s][system]["ratio"]) for s in shapes]
        lows = [m - min(summary[s][system]["ratio"]) for s, m in zip(shapes, medians)]
        highs = [max(summary[s][system]["ratio"]) - m for s, m in zip(shapes, medians)]
        ax.bar([j + i * width for j in range(len(shapes))], medians, width, yerr=[lows, highs],
               label=labels.get(system, system), capsize=3)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(shapes))], shapes)
    ax.set_ylim(0.85, 1.05)
    ax.set_ylabel("BE iterations/s × native")
    ax.set_title("A best-effort training loop alone through tallyd")
    ax.legend(fontsize=7, loc="upper center", ncol=len(systems))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--label", action="append", default=[], help="system=text for tables and plots")
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    labels = dict(item.split("=", 1) for item in args.label)
    summary = summarize(load(args.data))
    if not summary:
        sys.exit(f"report.py: no runs in {args.data}")
    table = markdown(summary, labels)
    print(table, end="")
    markdown_region.save(table, summary, args.markdown, args.json)
    if args.plot:
        plot(summary, labels, args.plot)


if __name__ == "__main__":
    main()
