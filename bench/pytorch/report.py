#!/usr/bin/env python3
"""Merges bench/pytorch/torch_bench.py runs (one JSON per mode) into one JSON document, a
markdown table and a PNG plot.

  report.py --out-dir DIR [--runs A.json B.json ...] [--meta KEY=VALUE ...]
            [--markdown FILE] [--plot FILE]

Without --runs it reads DIR/torch_bench.<mode>.json (native first, then uds, tcp, others).
Writes DIR/pytorch_bench.json, DIR/pytorch_bench.md and DIR/pytorch_bench.png (or --markdown /
--plot elsewhere). Each row is one measure (bench, variant, metric) with every mode's median,
p10, p90 (p99 for latencies) and the median's ratio to native. The plot needs matplotlib;
without it the plot is skipped with a message (exit status unaffected). Standard library
otherwise.
"""

import argparse
import glob
import json
import os
import sys

ORDER = ["native", "uds", "tcp"]


def load_runs(paths):
    runs = {}
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        runs[doc.get("label") or os.path.basename(p).split(".")[1]] = doc
    return dict(sorted(runs.items(), key=lambda kv: (ORDER.index(kv[0]) if kv[0] in ORDER else 99, kv[0])))


def merge(runs):
    rows = {}
    for mode, doc in runs.items():
        for r in doc.get("results", []):
            key = (r["bench"], r["variant"], r["metric"])
            row = rows.setdefault(key, {"bench": r["bench"], "variant": r["variant"], "metric": r["metric"],
                                        "unit": r.get("unit"), "modes": {}})
            row["modes"][mode] = {k: r.get(k) for k in ("median", "p10", "p90", "p99", "n", "min", "max",
                                                       "throughput", "throughput_unit", "first_repeat_s",
                                                       "client_stats")}
    for row in rows.values():
        base = row["modes"].get("native", {}).get("median")
        row["ratio_to_native"] = {m: (v["median"] / base if base and v.get("median") is not None else None)
                                  for m, v in row["modes"].items() if m != "native"}
    return list(rows.values())


def num(x):
    if x is None:
        return "–"
    a = abs(x)
    return f"{x:.0f}" if a >= 100 else f"{x:.1f}" if a >= 10 else f"{x:.2f}" if a >= 1 else f"{x:.3g}"


def cell(v):
    if not v or v.get("median") is None:
        return "failed / not run"
    s = f"{num(v['median'])} ({num(v['p10'])}–{num(v['p90'])}"
    if v.get("p99") is not None:
        s += f"; p99 {num(v['p99'])}"
    return s + ")"


def markdown(rows, runs, meta):
    modes = list(runs)
    lines = ["## PyTorch through tallyd", ""]
    desc = ", ".join(f"{k}: {v}" for k, v in meta.items() if v)
    info = next((d.get("info") for d in runs.values() if d.get("info")), None) or {}
    if info:
        desc += (", " if desc else "") + ", ".join(f"{k} {v}" for k, v in info.items())
    lines += [desc, "", "Median (p10–p90; p99 for latencies); ratio = median / native median.", ""]
    head = ["measure", "unit"]
    for m in modes:
        head.append(m)
        if m != "native":
            head.append(f"{m} ÷ native")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        cells = [f"{r['bench']} {r['variant']} ({r['metric']})", r["unit"] or ""]
        for m in modes:
            cells.append(cell(r["modes"].get(m)))
            if m != "native":
                ratio = r["ratio_to_native"].get(m)
                cells.append(f"{ratio:.2f}×" if ratio else "–")
        lines.append("| " + " | ".join(cells) + " |")
    thr = [r for r in rows if any(v.get("throughput") for v in r["modes"].values())]
    if thr:
        lines += ["", "Training throughput (at the median step time): " + "; ".join(
            f"{r['bench']} " + ", ".join(f"{m} {num(v['throughput'])} {v.get('throughput_unit') or ''}".rstrip()
                                          for m, v in r["modes"].items() if v.get("throughput")) for r in thr)]
    fails = [(m, f) for m, d in runs.items() for f in d.get("failures", [])]
    if fails:
        lines += ["", "Failed or skipped:", ""]
        for m, f in fails:
            tail = (f.get("stderr_tail") or [""])[-1]
            lines.append(f"- {m} {f['bench']}: {f['reason']}" + (f" — `{tail[:200]}`" if tail else ""))
    per_step = [(m, r) for m, d in runs.items() for r in d.get("results", []) if r.get("client_per_step")]
    if per_step:
        lines += ["", "What the client sent per step / request (tallyClientStats around the measured loop):", "",
                  "| mode | measure | variant | messages | round trips | bytes |", "|---|---|---|---|---|---|"]
        for m, r in per_step:
            c = r["client_per_step"]
            lines.append(f"| {m} | {r['bench']} | {r['variant']} | {c['messages']:.1f} | {c['round_trips']:.2f} | "
                         f"{c['bytes_sent']:.0f} |")
    else:
        lines += ["", "Client calls/bytes: not reported (no run through tallyd, or a client without tallyClientStats)."]
    return "\n".join(lines) + "\n"


def plot(rows, modes, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"report.py: matplotlib is not installed; skipping the plot ({path})", file=sys.stderr)
        return False
    others = [m for m in modes if m != "native"]
    shown = [r for r in rows if any(r["ratio_to_native"].get(m) for m in others)]
    if not shown:
        print("report.py: no measure has both a native and a tallyd median; no plot", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(shown) * max(1, len(others)) + 1.5))
    h = 0.8 / max(1, len(others))
    for i, m in enumerate(others):
        ys = [j + i * h for j in range(len(shown))]
        ax.barh(ys, [r["ratio_to_native"].get(m) or 0 for r in shown], height=h, label=m)
    ax.set_yticks([j + h * (len(others) - 1) / 2 for j in range(len(shown))])
    ax.set_yticklabels([f"{r['bench']} {r['variant']}" for r in shown])
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("median / native median (lower is better; 1 = native)")
    ax.set_title("PyTorch through tallyd")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--runs", nargs="*")
    ap.add_argument("--meta", action="append", default=[])
    ap.add_argument("--markdown")
    ap.add_argument("--plot")
    a = ap.parse_args()
    paths = a.runs or sorted(glob.glob(os.path.join(a.out_dir, "torch_bench.*.json")))
    if not paths:
        print(f"report.py: no torch_bench.*.json in {a.out_dir}", file=sys.stderr)
        return 1
    runs = load_runs(paths)
    meta = dict(kv.partition("=")[::2] for kv in a.meta)
    rows = merge(runs)
    doc = {"meta": meta, "modes": list(runs), "rows": rows,
           "failures": {m: d.get("failures", []) for m, d in runs.items()}, "runs": runs}
    out_json = os.path.join(a.out_dir, "pytorch_bench.json")
    with open(out_json + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(out_json + ".tmp", out_json)
    md = markdown(rows, runs, meta)
    md_path = a.markdown or os.path.join(a.out_dir, "pytorch_bench.md")
    with open(md_path, "w") as f:
        f.write(md)
    print(md)
    plot(rows, list(runs), a.plot or os.path.join(a.out_dir, "pytorch_bench.png"))
    print(f"report.py: wrote {out_json}, {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
