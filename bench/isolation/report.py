#!/usr/bin/env python3
"""Turn bench/isolation/run.sh's runs.jsonl into a markdown section, a JSON summary and a plot.

Usage:
  python3 bench/isolation/report.py runs.jsonl [--clocks clocks.csv] [--markdown docs/benchmarks.md]
                                    [--plot bench/results/<name>.png] [--block-plot PNG] [--json summary.json]
                                    [--rho X]

Per HP/BE pair (e.g. small:long) and BE build, one table: HP service p50 and p99 divided by the
same figure of HP alone (native, same request kind, same repeat and load) and BE throughput
divided by BE alone (native, same shape, block length and build, same repeat); median over the
repeats, min–max in brackets when there are several. Load-sweep runs (other ρ) get a table of
their own; pairs of one request kind and BE build at three or more BE block lengths get a
block-length table (--block-plot draws it). The section replaces the region between <!-- isolation:begin --> and
<!-- isolation:end --> (appended if absent). Lines of older runs (no "pair") count as large:mixed,
the pair those runs measured. The plot needs matplotlib; without it the plot is skipped with a
message.
"""

import argparse
import collections
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "report"))
import markdown_region  # noqa: E402

BEGIN = "<!-- isolation:begin -->"
END = "<!-- isolation:end -->"
OLD_PAIR = "large:mixed"
BASELINES = ("hp-alone", "tally-hp-alone", "be-alone")
# Issue #9's target for pairs with short BE blocks: HP p99 <= 1.5x alone at BE >= 0.7 of alone.
TARGET_HP_P99, TARGET_BE = 1.5, 0.7
# Table order; green-split-<N> rows go after mps-prio, by N.
SYSTEMS = ["native", "mps", "mps-prio", "green-split-*", "tally-passthrough", "tally-priority", "tally-no-gate",
           "tally-no-transforms", "tally-no-stream-priorities", "tally-partition", "tally-partition-64",
           "tally-partition-overlap", "tally-partition-gate", "tally-partition-24-overlap",
           "tally-partition-overlap-dyn", "tally-partition-control", "tally-default", "tally-no-chain",
           "tally-chain-always", "tally-default-no-launch-thread", "tally-default-be-inline-0", "tally-reserve-*",
           "tally-budget-*"]
LABELS = {
    "native": "two native processes (time-sliced)",
    "mps": "MPS",
    "mps-prio": "MPS, BE at lower client priority",
    "tally-passthrough": "tallyd passthrough",
    "tally-priority": "tallyd priority + gate + transforms",
    "tally-default": "tallyd priority, shipped defaults",
    "tally-no-chain": "tallyd shipped defaults − chained HP kernels",
    "tally-chain-always": "tallyd shipped defaults, HP kernels chained even alone",
    "tally-default-no-launch-thread": "tallyd shipped defaults, HP launches on its session thread",
    "tally-default-be-inline-0": "tallyd shipped defaults, BE syncs answered by the completion thread only",
    "tally-no-gate": "tallyd priority − gate",
    "tally-no-transforms": "tallyd priority − transforms",
    "tally-no-stream-priorities": "tallyd priority − stream priorities",
    "tally-partition": "tallyd priority + SM partition (HP 40 SMs)",
    "tally-partition-64": "tallyd priority + SM partition (HP 64 SMs)",
    "tally-partition-overlap": "tallyd priority + SM partition (40 SMs, overlap)",
    "tally-partition-gate": "tallyd priority + SM partition (40 SMs) + gate",
    "tally-partition-24-overlap": "tallyd priority + SM partition (24 SMs, overlap)",
    "tally-partition-overlap-dyn": "tallyd priority + SM partition (40 SMs, overlap), split only within 0.3 ms of HP work",
    "tally-partition-control": "tallyd priority + SM partition (40 SMs, overlap) + online split control",
}
REQUESTS = {"small": "8 kernels, ~200 µs", "large": "48 kernels, ~3.7 ms"}
BUILDS = {"ptx": "BE built with PTX (transformable)", "sass": "BE built SASS-only (code=sm_90)"}


def label(system):
    if system.endswith("+pdl"):
        return label(system[:-len("+pdl")]) + "; HP chains its own kernels (PDL)"
    m = re.fullmatch(r"green-split-(\d+)-overlap", system)
    if m:
        return (f"one native process, HP on a green context of every SM at top priority, BE on one of "
                f"{'every SM' if m.group(1) == '0' else 'the rest after ' + m.group(1) + ' SMs'} at the lowest")
    m = re.fullmatch(r"green-split-(\d+)", system)
    if m and m.group(1) == "0":
        return "one native process, one context: HP stream at top priority, BE at the lowest"
    if m:
        return f"static green-context split (HP {m.group(1)} SMs)"
    m = re.fullmatch(r"tally-reserve-(\d+)(-overlap)?(-nochain)?", system)
    if m:
        return (f"tallyd priority + SM partition (HP {m.group(1)} SMs{', overlap' if m.group(2) else ''})"
                f"{', HP kernels unchained' if m.group(3) else ''}")
    m = re.fullmatch(r"tally-budget-([0-9.]+)x", system)
    if m:
        return f"tallyd priority + SM reserves chosen online for HP p99 ≤ {m.group(1)}× alone through tallyd"
    return LABELS.get(system, system)


def system_order(system):
    if system.endswith("+pdl"):  # right after the system it modifies
        return system_order(system[:-len("+pdl")])[:2] + (1,)
    for pattern, group in ((r"green-split-(\d+)(?:-overlap)?", "green-split-*"), (r"tally-reserve-(\d+)(?:-overlap)?(?:-nochain)?", "tally-reserve-*"),
                           (r"tally-budget-([0-9.]+)x", "tally-budget-*")):
        m = re.fullmatch(pattern, system)
        if m:
            return (SYSTEMS.index(group), float(m.group(1)), 0)
    return (SYSTEMS.index(system) if system in SYSTEMS else len(SYSTEMS), system, 0)


def load(path):
    with open(path) as f:
        return [fill_defaults(json.loads(line)) for line in f if line.strip()]


def fill_defaults(r):
    """The fields of older lines (one pair, large:mixed) as newer ones carry them."""
    r = dict(r)
    baseline = r["system"] in BASELINES
    r.setdefault("pair", None if baseline else OLD_PAIR)
    if r.get("hp_request") is None and r["system"] != "be-alone":
        r["hp_request"] = (r.get("hp") or {}).get("request", r["pair"].split(":")[0] if r["pair"] else "large")
    if r.get("be_shape") is None and r["system"] not in ("hp-alone", "tally-hp-alone"):
        r["be_shape"] = (r.get("be") or {}).get("shape", "mixed")
    r.setdefault("be_block_us", None)
    return r


def be_key(r):
    return (r["be_shape"], r["be_block_us"], r["be_build"])


class Baselines:
    """hp-alone by (repeat, ρ, request kind); be-alone by (repeat, shape, block µs, build), any ρ
    (the load sweep reuses the main load's BE-alone run)."""

    def __init__(self, rows):
        self.hp, self.tally_hp, self.be = {}, {}, {}
        for r in rows:
            if r["system"] == "hp-alone" and r["hp"]:
                self.hp[(r["repeat"], r["rho"], r["hp_request"])] = r["hp"]
            elif r["system"] == "tally-hp-alone" and r["hp"]:
                self.tally_hp[(r["repeat"], r["rho"], r["hp_request"])] = r["hp"]
            elif r["system"] == "be-alone" and r["be"]:
                self.be.setdefault((r["repeat"],) + be_key(r), r["be"])

    def for_run(self, r):
        return self.hp.get((r["repeat"], r["rho"], r["hp_request"])), self.be.get((r["repeat"],) + be_key(r))


def normalized(rows):
    """{(pair, build, rho): {system: [per-repeat dicts of ×alone metrics, None for a failed run]}}"""
    base = Baselines(rows)
    out = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        if r["system"] in BASELINES:
            continue
        hp0, be0 = base.for_run(r)
        runs = out[(r["pair"], r["be_build"], r["rho"])][r["system"]]
        if not (r["hp"] and r["be"] and hp0 and be0):
            runs.append(None)
            continue
        h = r["hp"]
        runs.append({
            "p50": h["service_us"]["p50"] / hp0["service_us"]["p50"],
            "p99": h["service_us"]["p99"] / hp0["service_us"]["p99"],
            "resp_p99": h["response_us"]["p99"] / hp0["response_us"]["p99"],
            "be": r["be"]["iterations_per_s"] / be0["iterations_per_s"],
        })
    return out


def spread(values):
    """median, min, max of the runs that produced a value (None when none did)."""
    xs = [v for v in values if v is not None]
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)} if xs else None


def cell(runs, key, digits=2, ranges=True):
    s = spread([v[key] for v in runs if v])
    if s is None:
        return "failed" if runs else "—"
    text = f"{s['median']:.{digits}f}"
    if ranges and s["n"] > 1:
        text += f" ({s['min']:.{digits}f}–{s['max']:.{digits}f})"
    return text


def main_rho(rows, wanted):
    if wanted is not None:
        return wanted
    counts = collections.Counter(r["rho"] for r in rows if r["system"] not in BASELINES)
    return counts.most_common(1)[0][0] if counts else 0.5


def describe_pair(pair, build, rows, rho):
    """The pair's title and its absolute baselines."""
    kind, be = pair.split(":", 1)
    shape, _, us = be.partition("@")
    pair_rows = [r for r in rows if r["pair"] == pair and r["be_build"] == build and r["rho"] == rho]
    block_us = next((r["be_block_us"] for r in pair_rows if r["be_block_us"] is not None), None)
    block = f", blocks {block_us:g} µs" if block_us is not None else ""
    title = f"**{pair}**: HP {kind} ({REQUESTS.get(kind, kind)}), BE {shape}{block}; {BUILDS.get(build, build)}"
    base = Baselines(rows)
    repeats = sorted({r["repeat"] for r in pair_rows})
    hp = [base.hp.get((x, rho, kind)) for x in repeats]
    thp = [base.tally_hp.get((x, rho, kind)) for x in repeats]
    bes = [base.be.get((x, shape, block_us, build)) for x in repeats]
    facts = []
    if any(hp):
        facts.append("HP alone p50 {:.0f} µs, p99 {:.0f} µs".format(
            statistics.median(h["service_us"]["p50"] for h in hp if h),
            statistics.median(h["service_us"]["p99"] for h in hp if h)))
    if any(thp):
        facts.append("through tallyd alone p99 {:.0f} µs".format(
            statistics.median(h["service_us"]["p99"] for h in thp if h)))
    if any(bes):
        facts.append("BE alone {:.1f} iterations/s".format(statistics.median(b["iterations_per_s"] for b in bes if b)))
    return title, repeats, facts


def pair_table(pair, build, rows, norm, rho):
    title, repeats, facts = describe_pair(pair, build, rows, rho)
    lines = [f"{title}; ρ = {rho}, {len(repeats)} repeat(s)" + (": median (min–max)" if len(repeats) > 1 else ""),
             ""]
    if facts:
        lines += ["; ".join(facts) + ".", ""]
    lines += ["| system | HP p50 × alone | HP p99 × alone | BE × alone |", "|---|---:|---:|---:|"]
    systems = norm.get((pair, build, rho), {})
    for system in sorted(systems, key=system_order):
        v = systems[system]
        lines.append(f"| {label(system)} | {cell(v, 'p50')} | {cell(v, 'p99')} | {cell(v, 'be')} |")
    return lines + [""]


def sweep_table(pair, build, norm, rhos):
    systems = sorted({s for x in rhos for s in norm.get((pair, build, x), {})}, key=system_order)
    lines = [f"**Load sweep, {pair}** ({build}): HP p99 × alone / BE × alone", "",
             "| ρ | " + " | ".join(label(s) for s in systems) + " |", "|---:|" + "---:|" * len(systems)]
    for x in rhos:
        runs = norm.get((pair, build, x), {})
        lines.append(f"| {x} | " + " | ".join(f"{cell(runs.get(s, []), 'p99')} / {cell(runs.get(s, []), 'be')}"
                                              for s in systems) + " |")
    return lines + [""]


def block_sweeps(rows, norm, rho):
    """{(kind, build): [(block µs, shape, pair)...]} for request kinds and builds measured next to
    three or more BE block lengths at load rho, shortest block first."""
    sweeps = collections.defaultdict(dict)
    for r in rows:
        if r["pair"] and r["be_block_us"] is not None and (r["pair"], r["be_build"], rho) in norm:
            sweeps[(r["hp_request"], r["be_build"])][r["pair"]] = (r["be_block_us"], r["be_shape"], r["pair"])
    return {k: sorted(v.values()) for k, v in sweeps.items() if len({b for b, _, _ in v.values()}) >= 3}


def block_table(kind, build, points, norm, rho):
    systems = sorted({s for _, _, pair in points for s in norm[(pair, build, rho)]}, key=system_order)
    heads = [f"{shape} {block:g} µs" for block, shape, _ in points]
    lines = [f"**BE block length, HP {kind}** ({build}, ρ = {rho}): HP p99 × alone / BE × alone, median over "
             "the repeats", "", "| system | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(points)]
    for system in systems:
        cells = []
        for _, _, pair in points:
            runs = norm[(pair, build, rho)].get(system, [])
            cells.append(f"{cell(runs, 'p99', ranges=False)} / {cell(runs, 'be', ranges=False)}" if runs else "—")
        lines.append(f"| {label(system)} | " + " | ".join(cells) + " |")
    return lines + [""]


def block_plot(rows, rho, path):
    plt = markdown_region.pyplot("report.py")
    if plt is None:
        return
    norm = normalized(rows)
    sweeps = block_sweeps(rows, norm, rho)
    if not sweeps:
        print("report.py: no block-length sweep to plot", file=sys.stderr)
        return
    (kind, build), points = next(iter(sweeps.items()))
    systems = sorted({s for _, _, pair in points for s in norm[(pair, build, rho)]}, key=system_order)
    fig, (hp_ax, be_ax) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, system in enumerate(systems):
        xs, p99, be = [], [], []
        for block, _, pair in points:
            ok = [v for v in norm[(pair, build, rho)].get(system, []) if v]
            if ok:
                xs.append(block)
                p99.append(statistics.median(v["p99"] for v in ok))
                be.append(statistics.median(v["be"] for v in ok))
        style = dict(marker="osD^v<>pXh*P"[i % 12], color=f"C{i % 10}", label=label(system))
        hp_ax.plot(xs, p99, **style)
        be_ax.plot(xs, be, **style)
    hp_ax.axhline(TARGET_HP_P99, color="red", linestyle="--", linewidth=0.8)
    be_ax.axhline(TARGET_BE, color="red", linestyle="--", linewidth=0.8)
    for ax, name in ((hp_ax, "HP service p99 (× HP alone)"), (be_ax, "BE throughput (× BE alone)")):
        ax.set_xscale("log")
        ax.set_xlabel("BE block length (µs)")
        ax.set_ylabel(name)
    hp_ax.set_yscale("log")
    fig.legend(*hp_ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False)
    blocks = [block for block, _, _ in points]
    span = f"{min(blocks):g} µs to {max(blocks):g} µs"
    fig.suptitle(f"HP {kind} next to BE blocks of {span} ({build}, ρ = {rho}); targets in red", fontsize=11)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(systems) + 1) // 2), 1, 0.95))
    fig.savefig(path, dpi=110)


def pairs_and_builds(rows):
    seen = []
    for r in rows:
        if r["pair"] and (r["pair"], r["be_build"]) not in seen:
            seen.append((r["pair"], r["be_build"]))
    return seen


def section(rows, clocks, rho):
    norm = normalized(rows)
    lines = [BEGIN, ""]
    for (kind, build), points in block_sweeps(rows, norm, rho).items():
        lines += block_table(kind, build, points, norm, rho)
    for pair, build in pairs_and_builds(rows):
        if (pair, build, rho) in norm:
            lines += pair_table(pair, build, rows, norm, rho)
        sweep = sorted({x for (p, b, x) in norm if p == pair and b == build and x != rho})
        if sweep:
            lines += sweep_table(pair, build, norm, sweep)
    if clocks:
        lines += [f"GPU SM clock during the runs: {clocks}.", ""]
    lines.append(END)
    return "\n".join(lines)


def summary(rows, rho):
    """The tables' numbers as JSON: pairs -> build -> rho -> system -> metric -> spread."""
    out = {"main_rho": rho, "pairs": {}}
    for (pair, build, x), systems in normalized(rows).items():
        target = out["pairs"].setdefault(pair, {}).setdefault(build, {}).setdefault(str(x), {})
        for system, runs in systems.items():
            target[system] = {key: spread([v[key] for v in runs if v]) for key in ("p50", "p99", "resp_p99", "be")}
            target[system]["runs"] = len(runs)
            target[system]["failed"] = sum(1 for v in runs if v is None)
    return out


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


def plot(rows, rho, path):
    plt = markdown_region.pyplot("report.py")
    if plt is None:
        return
    norm = normalized(rows)
    panels = [(p, b) for p, b in pairs_and_builds(rows) if (p, b, rho) in norm]
    if not panels:
        print("report.py: nothing to plot", file=sys.stderr)
        return
    import matplotlib.ticker  # importable once pyplot is
    systems = sorted({s for p, b in panels for s, runs in norm[(p, b, rho)].items() if any(runs)}, key=system_order)
    # One marker (shape and colour) per system, the same in every panel.
    shapes = "osD^v<>pXh*P"
    style = {s: (shapes[i % len(shapes)], f"C{i % 10}") for i, s in enumerate(systems)}
    cols = min(3, len(panels))
    rows_n = (len(panels) + cols - 1) // cols
    # The legend's labels are the tables' (long): one column of them under one or two panels.
    legend_cols = 3 if cols == 3 else 1
    legend_rows = (len(systems) + legend_cols - 1) // legend_cols
    fig, axes = plt.subplots(rows_n, cols, figsize=(max(5 * cols, 11), 4.2 * rows_n + 0.2 * legend_rows),
                             squeeze=False)
    for ax, (pair, build) in zip(axes.flat, panels):
        for system, runs in norm[(pair, build, rho)].items():
            ok = [v for v in runs if v]
            if not ok:
                continue
            marker, color = style[system]
            ax.scatter([statistics.median(v["be"] for v in ok)], [statistics.median(v["p99"] for v in ok)],
                       marker=marker, color=color, label=label(system))
        ax.axhline(TARGET_HP_P99, color="red", linestyle="--", linewidth=0.8)
        ax.axvline(TARGET_BE, color="red", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        low, high = ax.get_ylim()
        if high / low < 10:  # under a decade the minor ticks are the only labels
            ax.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
        ax.set_xlabel("BE throughput (× BE alone)")
        ax.set_ylabel("HP service p99 (× HP alone)")
        ax.set_title(f"{pair} ({build}), ρ = {rho}", fontsize=10)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], linestyle="", marker=style[s][0], color=style[s][1], label=label(s))
               for s in systems]
    fig.legend(handles=handles, loc="lower center", ncol=legend_cols, fontsize=7, frameon=False)
    fig.suptitle("HP p99 vs BE throughput; target = lower right of the red lines", fontsize=11)
    legend_share = 0.2 * legend_rows / fig.get_figheight()
    fig.tight_layout(rect=(0, min(0.6, 0.03 + legend_share), 1, 0.96))
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("runs")
    p.add_argument("--clocks")
    p.add_argument("--markdown")
    p.add_argument("--plot")
    p.add_argument("--block-plot", help="HP p99 and BE throughput against BE block length")
    p.add_argument("--json", help="write the tables' numbers here")
    p.add_argument("--rho", type=float, help="the main load (default: the load of most runs)")
    a = p.parse_args()
    rows = load(a.runs)
    rho = main_rho(rows, a.rho)
    markdown_region.publish(section(rows, clock_summary(a.clocks), rho), a.markdown, BEGIN, END)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary(rows, rho), f, indent=1)
    if a.plot:
        plot(rows, rho, a.plot)
    if a.block_plot:
        block_plot(rows, rho, a.block_plot)


if __name__ == "__main__":
    main()
