"""Plots queue_sharing_probe's JSONL: HP empty-kernel round trip against the number of busy
streams, per placement, with the driver's 8 queues and with 32. Usage: plot.py <dir>"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

folder = sys.argv[1]
rows = [json.loads(line) for path in sorted(glob.glob(os.path.join(folder, "queue_*.jsonl"))) for line in open(path)]
fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
for ax, connections in zip(axes, ("default", "32")):
    for placement in sorted({r["placement"] for r in rows}):
        points = {}
        for r in rows:
            if r["connections"] == connections and r["placement"] == placement and r["priority"] == "highest":
                points.setdefault(r["busy_streams"], []).append(r["median_us"])
        xs = sorted(points)
        ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], marker="o", label=placement)
    ax.set_title(f"CUDA_DEVICE_MAX_CONNECTIONS = {'8 (default)' if connections == 'default' else connections}")
    ax.set_xlabel("busy low-priority streams created before")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
axes[0].set_ylabel("highest-priority empty kernel round trip, median (µs)")
axes[1].legend(fontsize=8)
fig.suptitle("H200: a stream beside a busy one in a hardware queue waits behind it (queue_sharing_probe)")
fig.tight_layout()
fig.savefig(os.path.join(folder, "queue_sharing.png"), dpi=110)
