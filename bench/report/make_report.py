#!/usr/bin/env python3
"""Turn bench/run_micro.sh's micro.json into a markdown section and a plot.

Usage:
  python3 bench/report/make_report.py <micro.json> [--markdown docs/benchmarks.md]
                                      [--plot bench/results/<name>.png] [--logy]

--markdown FILE  replace the region between <!-- micro:begin --> and
                 <!-- micro:end --> in FILE with the generated section (the
                 region is appended if absent; FILE is created with a short
                 intro if missing). Everything outside the region is kept.
                 Without --markdown the section is printed on stdout.
--plot FILE      bandwidth-vs-size plot (log x axis; one line per
                 mode x direction x memory kind). Needs matplotlib; without it
                 the plot is skipped with a message and the exit status stays 0.
--logy           also use a log scale for the plot's y axis.

Only the Python standard library is needed apart from matplotlib for the plot.
"""

import argparse
import json
import os
import sys

import markdown_region  # noqa: E402  (this folder)

BEGIN = "<!-- micro:begin -->"
END = "<!-- micro:end -->"

INTRO = """# Benchmarks

Performance measurements of Tally: CUDA applications running against `tallyd`
through `libtally_client.so`, compared with the same programs running natively.

Generated sections sit between `<!-- ...:begin -->` and `<!-- ...:end -->`
markers and are rewritten by the scripts under `bench/`; edit only outside them.
"""

MODE_ORDER = ["native", "uds", "tcp"]
MODE_LABEL = {"native": "native", "uds": "tallyd UDS", "tcp": "tallyd TCP"}

# bench name -> (title, description, higher_is_better)
SCALAR_BENCHES = [
    ("sync_rtt", "Synchronous round trip",
     "One 4-byte `cudaMemcpy` device→host into pageable host memory, timed per call.", False),
    ("launch_sync", "Launch + cudaDeviceSynchronize",
     "Launch of an empty kernel (1 block, 1 thread) followed by `cudaDeviceSynchronize`, "
     "timed per pair.", False),
    ("launch_sync_stream", "Launch + cudaStreamSynchronize",
     "Launch of an empty kernel on a non-blocking stream followed by `cudaStreamSynchronize`, "
     "timed per pair.", False),
    ("launch_async", "Asynchronous launch cost",
     "A batch of empty-kernel launches on one stream, then one `cudaStreamSynchronize`; "
     "batch time divided by the launch count; statistics over batches.", False),
    ("launch_async_rate", "Asynchronous launch rate",
     "Same batches as above, expressed as launches per second.", True),
]

BW_KINDS = [("h2d", "pinned"), ("d2h", "pinned"), ("h2d", "pageable"), ("d2h", "pageable")]
DIR_LABEL = {"h2d": "host→device", "d2h": "device→host"}
KIND_LABEL = {"pinned": "pinned (cudaMallocHost)", "pageable": "pageable (malloc)"}

DEFAULT_UNIT = {"sync_rtt": "us", "launch_sync": "us", "launch_sync_stream": "us",
                "launch_async": "us/launch", "launch_async_rate": "launches/s"}
UNIT_LABEL = {"us": "µs", "us/launch": "µs/launch", "launches/s": "launches/s", "GB/s": "GB/s"}


def fmt(v):
    """About three significant digits; thousands separators for big numbers."""
    if v is None:
        return "—"
    a = abs(v)
    if a == 0:
        return "0"
    if round(a) >= 1000:
        return "{:,.0f}".format(v)
    if round(a, 1) >= 100:
        return "{:.0f}".format(v)
    if round(a, 2) >= 10:
        return "{:.1f}".format(v)
    if round(a, 3) >= 1:
        return "{:.2f}".format(v)
    return "{:#.3g}".format(v)


def option(doc, bench, name, default):
    """Last value of --name in the options run_micro.sh used for bench (extra ones win)."""
    p = doc.get("params") or {}
    toks = (str(p.get(bench, "")) + " " + str(p.get("extra", ""))).split()
    val = default
    for i, t in enumerate(toks[:-1]):
        if t == "--" + name:
            val = toks[i + 1]
    return val


def size_label(b):
    if b is None:
        return "—"
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if b >= (1 << shift) and b % (1 << shift) == 0:
            return "{} {}".format(b >> shift, unit)
    return "{} B".format(b)


def cell(r):
    if r is None:
        return "—"
    return "{} ({}–{})".format(fmt(r.get("median")), fmt(r.get("p10")), fmt(r.get("p90")))


def ratio(r, base):
    if r is None or base is None:
        return "—"
    m, b = r.get("median"), base.get("median")
    if m is None or not b:
        return "—"
    return "{:.2f}×".format(m / b)


def ordered_modes(doc):
    seen = list(doc.get("modes") or [])
    for r in doc.get("results", []):
        if r.get("mode") not in seen:
            seen.append(r.get("mode"))
    return [m for m in MODE_ORDER if m in seen] + [m for m in seen if m not in MODE_ORDER]


def index_results(doc):
    idx = {}
    for r in doc.get("results", []):
        idx[(r.get("bench"), r.get("size"), r.get("mode"))] = r
    return idx


def failed_label(doc, mode, bench_family):
    for f in doc.get("failures", []):
        if f.get("mode") == mode and f.get("bench") == bench_family:
            return "failed"
    return "—"


def table(doc, idx, modes, bench, family, sizes, with_size):
    remote = [m for m in modes if m != "native"]
    header = (["size"] if with_size else []) + [MODE_LABEL.get(m, m) for m in modes]
    if "native" in modes:
        header += ["{} ÷ native".format(MODE_LABEL.get(m, m)) for m in remote]
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for size in sizes:
        row = [size_label(size)] if with_size else []
        base = idx.get((bench, size, "native"))
        for m in modes:
            r = idx.get((bench, size, m))
            row.append(cell(r) if r else failed_label(doc, m, family))
        if "native" in modes:
            for m in remote:
                row.append(ratio(idx.get((bench, size, m)), base))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def method_text(doc):
    p = doc.get("params") or {}
    lines = [
        "Method: `bench/run_micro.sh` starts one `tallyd` listening on a Unix socket and on a "
        "TCP port of 127.0.0.1, then runs each benchmark of `tally_microbench` three times in a "
        "row in the same run: natively, with `LD_PRELOAD=libtally_client.so "
        "TALLY_SERVER=unix:…` (**UDS**) and with `TALLY_SERVER=tcp://127.0.0.1:…` (**TCP**). "
        "Each benchmark is a fresh process. Times are host wall-clock "
        "(`std::chrono::steady_clock`) around synchronous calls, so forwarding costs are "
        "included; every timed sample follows warm-up calls. Cells show the median and, in "
        "parentheses, the 10th–90th percentile spread. The ratio columns divide a remote "
        "median by the native one (for µs lower is better; for GB/s and launches/s higher "
        "is better). Bandwidth is in GB/s = 10⁹ bytes/s; host buffers hold pseudo-random "
        "data and one word per 4 KiB page is changed before every host→device copy (outside "
        "the timed call), so neither compression nor caching of repeated content helps.",
    ]
    opts = [(k, v) for k, v in p.items() if k not in ("extra", "timeout_s")]
    if opts or p.get("extra"):
        lines.append("")
        lines.append("Options used: " + "; ".join("`{}`: `{}`".format(k, v) for k, v in opts)
                     + ("; extra for all: `{}`".format(p["extra"]) if p.get("extra") else "")
                     + ".")
    return lines


def markdown_section(doc, plot_rel):
    idx = index_results(doc)
    modes = ordered_modes(doc)
    m = doc.get("machine") or {}
    if isinstance(m, str):
        m = {"description": m}
    out = [BEGIN, "## Microbenchmarks: native vs. tallyd over UDS and TCP", ""]
    out.append("<!-- generated by bench/report/make_report.py from micro.json; "
               "do not edit by hand -->")
    out.append("")
    if "description" in m:
        out.append("- Machine: " + m["description"])
    else:
        out.append("- GPU (name, driver): {}".format(m.get("gpu", "unknown")))
        cpu = m.get("cpu", "unknown")
        if m.get("cpus"):
            cpu += " ({} logical CPUs)".format(m["cpus"])
        out.append("- Host: `{}`, CPU: {}, kernel {}".format(m.get("hostname", "?"), cpu,
                                                          m.get("kernel", "?")))
    line = "- Date: {}".format(doc.get("date", "unknown"))
    if doc.get("duration_s") is not None:
        line += " (runs took {} s)".format(doc["duration_s"])
    out.append(line)
    if doc.get("git"):
        out.append("- Source: commit `{}`".format(doc["git"][:12]))
    out.append("")
    out.extend(method_text(doc))
    out.append("")

    for bench, title, desc, _higher in SCALAR_BENCHES:
        rows = [r for r in doc.get("results", []) if r.get("bench") == bench]
        family = bench.replace("_rate", "").replace("_stream", "")
        if not rows and not any(f.get("bench") == family for f in doc.get("failures", [])):
            continue
        unit = rows[0].get("unit", "") if rows else DEFAULT_UNIT.get(bench, "")
        out.append("### {} ({})".format(title, UNIT_LABEL.get(unit, unit)))
        out.append("")
        if bench.startswith("launch_async"):
            desc += " {} launches per batch.".format(
                fmt(float(option(doc, "launch_async", "launch-per-batch", 100000))))
        out.append(desc)
        out.append("")
        sizes = sorted({r.get("size") for r in rows}, key=lambda s: -1 if s is None else s) or [None]
        out.extend(table(doc, idx, modes, bench, family, sizes, with_size=False))
        ns = ["{} {}".format(MODE_LABEL.get(mm, mm), idx[(bench, sizes[0], mm)].get("n"))
              for mm in modes if (bench, sizes[0], mm) in idx]
        if ns:
            out.append("")
            out.append("Samples: " + ", ".join(ns) + ".")
        out.append("")

    bw_any = False
    for d, k in BW_KINDS:
        bench = "bandwidth_{}_{}".format(d, k)
        rows = [r for r in doc.get("results", []) if r.get("bench") == bench]
        if not rows:
            continue
        if not bw_any:
            out.append("### Bandwidth (GB/s, higher is better)")
            out.append("")
            out.append("Synchronous `cudaMemcpy` of one buffer, timed per call; each "
                       "size/direction/memory kind gets warm-up copies, then repetitions until "
                       "about {} s have passed (at least {}, at most {}).".format(
                           option(doc, "bandwidth", "bw-budget-s", "0.5"),
                           option(doc, "bandwidth", "bw-min-reps", "3"),
                           option(doc, "bandwidth", "bw-max-reps", "1000")))
            out.append("")
            if plot_rel:
                out.append("![bandwidth vs. size]({})".format(plot_rel))
                out.append("")
            bw_any = True
        out.append("#### {}, {}".format(DIR_LABEL[d], KIND_LABEL[k]))
        out.append("")
        sizes = sorted({r.get("size") for r in rows if r.get("size") is not None})
        out.extend(table(doc, idx, modes, bench, "bandwidth", sizes, with_size=True))
        out.append("")
    if not bw_any and any(f.get("bench") == "bandwidth" for f in doc.get("failures", [])):
        out.append("### Bandwidth")
        out.append("")
        out.append("No bandwidth results (see failures below).")
        out.append("")

    fails = doc.get("failures") or []
    if fails:
        out.append("### Failed runs")
        out.append("")
        for f in fails:
            tail = [t for t in (f.get("stderr_tail") or []) if t.strip()]
            last = tail[-1] if tail else ""
            out.append("- {} [{}]: {}{}".format(
                f.get("bench"), MODE_LABEL.get(f.get("mode"), f.get("mode")), f.get("reason"),
                " — `{}`".format(last.replace("`", "'")) if last else ""))
        out.append("")
    out.append(END)
    return "\n".join(out) + "\n"


def update_markdown(path, section):
    markdown_region.update_markdown(path, BEGIN, END, section, INTRO)


def make_plot(doc, path, logy):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        print("make_report.py: matplotlib is not installed; skipping the plot ({}). Re-run "
              "this script on a machine with matplotlib to make it.".format(path),
              file=sys.stderr)
        return False
    colors = {"native": "#1f77b4", "uds": "#ff7f0e", "tcp": "#2ca02c"}
    styles = {"h2d": "-", "d2h": "--"}
    markers = {"pinned": "o", "pageable": "s"}
    fig, ax = plt.subplots(figsize=(10, 6))
    all_sizes = set()
    for mode in ordered_modes(doc):
        for d, k in BW_KINDS:
            bench = "bandwidth_{}_{}".format(d, k)
            pts = sorted((r["size"], r["median"]) for r in doc.get("results", [])
                         if r.get("mode") == mode and r.get("bench") == bench
                         and r.get("size") and r.get("median") is not None)
            if not pts:
                continue
            all_sizes.update(s for s, _ in pts)
            ax.plot([s for s, _ in pts], [v for _, v in pts], linestyle=styles[d],
                    marker=markers[k], markersize=5, color=colors.get(mode),
                    markerfacecolor=colors.get(mode) if k == "pinned" else "white",
                    label="{}, {}, {}".format(MODE_LABEL.get(mode, mode), d.upper(), k))
    if not all_sizes:
        plt.close(fig)
        print("make_report.py: no bandwidth results; no plot written", file=sys.stderr)
        return False
    ax.set_xscale("log", base=2)
    ticks = sorted(all_sizes)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([size_label(s) for s in ticks], rotation=30)
    if logy:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("transfer size")
    ax.set_ylabel("GB/s (10⁹ bytes/s), median")
    gpu = (doc.get("machine") or {}).get("gpu", "") if isinstance(doc.get("machine"), dict) \
        else str(doc.get("machine", ""))
    ax.set_title("cudaMemcpy bandwidth: native vs. tallyd (UDS, TCP)\n{} — {}".format(
        gpu, doc.get("date", "")), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("make_report.py: wrote " + path, file=sys.stderr)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("micro_json")
    ap.add_argument("--markdown", help="markdown file whose micro region is rewritten")
    ap.add_argument("--plot", help="PNG file for the bandwidth plot")
    ap.add_argument("--logy", action="store_true", help="log scale on the plot's y axis")
    a = ap.parse_args()

    with open(a.micro_json, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        sys.exit("make_report.py: {} has no 'results' list".format(a.micro_json))

    plot_rel = None
    if a.plot:
        made = make_plot(doc, a.plot, a.logy)
        if (made or os.path.exists(a.plot)) and a.markdown:
            plot_rel = os.path.relpath(os.path.abspath(a.plot),
                                       os.path.dirname(os.path.abspath(a.markdown)))
            plot_rel = plot_rel.replace(os.sep, "/")

    section = markdown_section(doc, plot_rel)
    if a.markdown:
        update_markdown(a.markdown, section)
        print("make_report.py: updated " + a.markdown, file=sys.stderr)
    else:
        sys.stdout.write(section)


if __name__ == "__main__":
    main()
