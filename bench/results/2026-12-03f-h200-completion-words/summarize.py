#!/usr/bin/env python3
"""Completion words on/off, same binaries, interleaved rounds in three leases of the H200:
summary.json, summary.md and words.png from the micro.json files beside this script.

    /usr/bin/python3 summarize.py
"""
import json
import pathlib
import statistics

HERE = pathlib.Path(__file__).resolve().parent
LEASES = {"3173a52-gpu-written": "GPU writes every word (3173a52)",
          "01f98ae-tallyd-stored": "tallyd stores every word (01f98ae)",
          "08ed8de-hybrid": "tallyd stores, GPU writes a long copy's too (08ed8de)",
          "d7f7905-final": "... and the session thread does not wait for that copy (d7f7905, shipped)"}
MEASURES = [("sync_rtt", 4, "sync round trip (4-byte D2H)", False),
            ("launch_sync", None, "launch + device sync", False),
            ("launch_sync_stream", None, "launch + stream sync", False),
            ("bandwidth_h2d_pinned", 1 << 20, "pinned H2D 1 MiB", True),
            ("bandwidth_d2h_pinned", 1 << 20, "pinned D2H 1 MiB", True),
            ("bandwidth_h2d_pinned", 4 << 20, "pinned H2D 4 MiB", True),
            ("bandwidth_d2h_pinned", 4 << 20, "pinned D2H 4 MiB", True)]


def medians(path):
    out = {}
    for r in json.loads(path.read_text())["results"]:
        out[(r["bench"], r["size"] if r["bench"].startswith(("bandwidth", "sync_rtt")) else None, r["mode"])] = r["median"]
    return out


def ratio(m, bench, size):
    """The issue's measure: time × native for round trips, bandwidth × native for copies."""
    native, uds = m.get((bench, size, "native")), m.get((bench, size, "uds"))
    if not native or not uds:
        return None
    return uds / native


def main():
    summary = {}
    for lease in LEASES:
        for variant in ("words", "nowords"):
            rounds = sorted((HERE / lease).glob(f"{variant}-*/micro.json"))
            per = {label: [] for _, _, label, _ in MEASURES}
            absolute = {label: [] for _, _, label, _ in MEASURES}
            for path in rounds:
                m = medians(path)
                for bench, size, label, _ in MEASURES:
                    r = ratio(m, bench, size)
                    if r is not None:
                        per[label].append(round(r, 3))
                        absolute[label].append(m[(bench, size, "uds")])
            summary.setdefault(lease, {})[variant] = {"x_native": per, "uds_median": absolute}
    (HERE / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")

    lines = ["| lease | measure | words: × native, per round | without words: × native | "
             "through tallyd, words / without (median of the rounds; µs or GB/s) |", "|---|---|---|---|---|"]
    for lease, title in LEASES.items():
        for _, _, label, hib in MEASURES:
            w, n = summary[lease]["words"], summary[lease]["nowords"]
            fmt = lambda xs: ", ".join(f"{x:.2f}" for x in xs)
            lines.append(f"| {title} | {label} | {fmt(w['x_native'][label])} | {fmt(n['x_native'][label])} | "
                         f"{statistics.median(w['uds_median'][label]):.2f} / {statistics.median(n['uds_median'][label]):.2f} |")
    (HERE / "summary.md").write_text("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, len(LEASES), figsize=(17, 7), sharey="row")
    for row, (copies, target, ylabel) in enumerate(((False, 1.5, "time × native (round trips)"),
                                                   (True, 0.9, "bandwidth × native (pinned copies)"))):
        labels = [label for _, _, label, is_copy in MEASURES if is_copy == copies]
        for ax, (lease, title) in zip(axes[row], LEASES.items()):
            for i, label in enumerate(labels):
                for variant, color, dx in (("nowords", "tab:gray", -0.12), ("words", "tab:blue", 0.12)):
                    ys = summary[lease][variant]["x_native"][label]
                    ax.scatter([i + dx] * len(ys), ys, color=color, s=18, label=variant if i == 0 else None)
            ax.axhline(1.0, color="black", lw=0.6)
            ax.axhline(target, color="tab:red", lw=0.8, ls="--")
            ax.set_xticks(range(len(labels)), labels, fontsize=7)
            if row == 0:
                ax.set_title(title, fontsize=8)
        axes[row][0].set_ylabel(ylabel)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Completion words on and off, same binaries, interleaved rounds (H200, UDS, HP client); "
                 "dashed red: the issue's target", fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / "words.png", dpi=110)


if __name__ == "__main__":
    main()
