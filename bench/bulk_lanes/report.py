#!/usr/bin/env python3
"""Table (markdown, JSON) and plot of bench/bulk_lanes/run.sh: pinned copy bandwidth natively and
through tallyd over TCP and TLS with N bulk lanes, per size and direction. Cells: the mean over the
rounds of each round's median (GB/s), then each round's median."""
import argparse
import collections
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import markdown_region  # noqa: E402
import microbench_json  # noqa: E402


def load(out_dir):
    runs = collections.defaultdict(list)  # (config, bench, size) -> medians, one per round
    for path in sorted(glob.glob(os.path.join(out_dir, "*.json"))):
        m = re.fullmatch(r"(native|tcp-\d+|tls-\d+)-(\d+)\.json", os.path.basename(path))
        if not m:
            continue
        for d in microbench_json.measurements(path):
            runs[(m.group(1), d["bench"], d["size"])].append(d["median"])
    return runs


def config_order(configs):
    def key(c):
        if c == "native":
            return (0, 0)
        mode, lanes = c.split("-")
        return (1 if mode == "tcp" else 2, int(lanes))
    return sorted(configs, key=key)


def label(c):
    if c == "native":
        return "native"
    mode, lanes = c.split("-")
    return f"{mode.upper()}, {lanes} lanes"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir")
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    runs = load(args.out_dir)
    configs = config_order({c for c, _, _ in runs})
    rows = sorted({(b, s) for _, b, s in runs}, key=lambda r: (r[0], r[1]))
    summary = []
    lines = ["| copy | " + " | ".join(label(c) for c in configs) + " |", "|---" * (len(configs) + 1) + "|"]
    for bench, size in rows:
        cells = []
        for c in configs:
            v = runs.get((c, bench, size), [])
            mean = sum(v) / len(v) if v else None
            summary.append({"config": c, "bench": bench, "size": size, "mean_of_medians_gbs": mean, "medians": v})
            cells.append(f"{mean:.2f} ({' / '.join(f'{x:.1f}' for x in v)})" if v else "—")
        name = bench.replace("bandwidth_", "").replace("_pinned", " pinned").replace("h2d", "H2D").replace("d2h", "D2H")
        lines.append(f"| {name} {size >> 20} MiB | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    print(table)
    markdown_region.save(table, summary, args.markdown, args.json)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for ax, direction in zip(axes, ["h2d", "d2h"]):
            for c in configs:
                if c == "native":
                    continue
                pts = [(s, sum(runs[(c, b, s)]) / len(runs[(c, b, s)])) for b, s in rows
                       if direction in b and runs.get((c, b, s))]
                ax.plot([p[0] >> 20 for p in pts], [p[1] for p in pts], marker="o",
                        linestyle="-" if c.startswith("tcp") else "--", label=label(c))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("copy size (MiB)")
            ax.set_title(f"pinned {direction.upper()} through tallyd")
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("GB/s (mean of round medians)")
        axes[1].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
