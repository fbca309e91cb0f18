#!/usr/bin/env python3
"""The short pair's HP tail, request by request: pools each system's per-request service logs
(hp_infer --service-log) over the repeats of a run and prints p50/p90/p99/p99.9 and how many
requests took over 700 and 900 us; plots the tail (1 - CDF) of every system.
Usage: summarize.py [--plot PNG]   (run from this directory)"""
import glob
import io
import sys
import tarfile

import numpy as np

RUNS = ["a-first-look", "b-probe-ab", "c-launch-thread-and-long", "d-breath-ab", "e-final-b7f30e5"]
SYSTEMS = {
    "green-split-0": "one native context, stream priorities",
    "mps-prio": "MPS with priorities",
    "tally-default-no-launch-thread": "tallyd defaults, no HP launch thread",
    "tally-default": "tallyd defaults",
    "tally-default-be-inline-0": "tallyd defaults, BE syncs only on the completion thread",
}


def logs(run):
    """{(variant, system): [service µs arrays]} from a run's service-logs.tgz."""
    out = {}
    with tarfile.open(f"{run}/service-logs.tgz") as tar:
        for m in tar.getmembers():
            if not m.isfile() or "small-short" not in m.name:
                continue
            parts = m.name.split("/")
            variant = "old" if {"iso-old", "old"} & set(parts) else "new" if {"iso-new", "new"} & set(parts) else ""
            name = m.name.rsplit("/", 1)[-1]
            system = name[len("small-short-"):].rsplit("-sass-", 1)[0]
            data = np.loadtxt(io.BytesIO(tar.extractfile(m).read()), skiprows=1)[:, 1]
            out.setdefault((variant, system), []).append(data)
    return out


def main():
    rows, curves = [], []
    for run in RUNS:
        for (variant, system), arrays in sorted(logs(run).items()):
            s = np.concatenate(arrays)
            label = SYSTEMS.get(system, system) + (f" (run of the {variant} tallyd)" if variant else "")
            q = np.percentile(s, [50, 90, 99, 99.9])
            rows.append((run, label, len(s), *q, int((s > 700).sum()), int((s > 900).sum())))
            if run == "b-probe-ab":  # the plot: one lease, tallyd with and without the quiet-GPU probe
                curves.append((label, np.sort(s)))
    print("| run | system | requests | p50 µs | p90 µs | p99 µs | p99.9 µs | > 700 µs | > 900 µs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.0f} | {r[6]:.0f} | {r[7]} | {r[8]} |")
    if "--plot" in sys.argv:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4))
        for label, s in curves:
            tail = 1.0 - np.arange(len(s)) / len(s)
            ax.plot(s, tail, label=label)
        ax.set_yscale("log")
        ax.set_xlim(550, 1500)
        ax.set_ylim(1e-4, 1)
        ax.set_xlabel("HP request service time (µs), three 4 s repeats pooled")
        ax.set_ylabel("fraction of requests slower")
        ax.set_title("small:short pair, H200: HP tail next to BE (same lease)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(sys.argv[sys.argv.index("--plot") + 1], dpi=120)


if __name__ == "__main__":
    main()
