#!/usr/bin/env python3
"""Tables of bench/pytorch_pairs/run.sh's runs.jsonl, one per pair (HP model : BE model).

Usage:
  python3 bench/pytorch_pairs/report.py runs.jsonl [--json J] [--markdown M] [--metric response|service]

Per system: HP latency p50 and p99 (default: response time = completion - scheduled arrival, so
queueing behind a slow request counts; --metric service: completion - start) and their ratio to
HP alone (native, same pair, same rate and schedule); BE training throughput and its ratio to BE
alone (native); system throughput = HP throughput / HP alone + BE throughput / BE alone (the
Tally paper's sum of normalized throughputs; HP throughput = requests / max(window, last
completion), so it drops below 1 only when the HP cannot keep up with its arrivals). The
baselines through tallyd (tally-hp-alone, tally-be-alone) are listed against native alone too.
Several lines of the same pair and system (runs.jsonl files concatenated): medians, with n.
The markdown goes to stdout, and to M when given.
"""

import argparse
import collections
import json
import re
import statistics
import sys

ORDER = ["native", "mps", "mps-prio", "tally-passthrough", "tally-default", "tally-priority", "tally-partition",
         "tally-partition-64", "tally-partition-overlap"]
BASELINES = ["hp-alone", "tally-hp-alone", "be-alone", "tally-be-alone"]
LABELS = {
    "native": "two native processes (time-sliced)",
    "mps": "MPS",
    "mps-prio": "MPS, BE at lower client priority",
    "tally-passthrough": "tallyd passthrough",
    "tally-default": "tallyd priority, shipped defaults (stream priorities only)",
    "tally-priority": "tallyd priority + gate + transforms",
    "tally-partition": "tallyd priority + SM partition (HP 40 SMs)",
    "tally-partition-64": "tallyd priority + SM partition (HP 64 SMs)",
    "tally-partition-overlap": "tallyd priority + SM partition (40 SMs, overlap)",
    "hp-alone": "HP alone (native)",
    "tally-hp-alone": "HP alone through tallyd (priority)",
    "be-alone": "BE alone (native)",
    "tally-be-alone": "BE alone through tallyd (priority)",
}
MODELS = {"bert": "BERT-base inference (batch 1, seq 128, fp32)",
          "resnet50": "ResNet-50 inference (batch 1, 224², fp32)"}
BE_MODELS = {"resnet50": "ResNet-50 training (batch 32, SGD, fp32)",
             "gpt2": "GPT-2 small training (batch 4 × 512 tokens, AdamW, bf16 autocast)",
             "ticker": "a ticker (one tiny kernel every 2 ms: partitions split, next to no BE work)"}



def budget_label(system):
    m = re.fullmatch(r"tally-budget-([0-9.]+)x", system)
    return f"tallyd priority + SM reserves chosen online for HP p99 ≤ {m.group(1)}× alone" if m else system

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if a is not None and b else None


def hp_values(recs, metric):
    """Medians over the records of HP p50, p99 (µs) and throughput (requests/s)."""
    p50, p99, tput = [], [], []
    for r in recs:
        hp = r.get("hp") or {}
        lat = hp.get(metric + "_us")
        if not lat:
            continue
        p50.append(lat.get("p50"))
        p99.append(lat.get("p99"))
        t = hp.get("throughput")
        if t is None and hp.get("requests") is not None and hp.get("seconds"):
            t = hp["requests"] / hp["seconds"]
        tput.append(t)
    return median(p50), median(p99), median(tput)


def be_value(recs):
    return median([(r.get("be") or {}).get("iterations_per_s") for r in recs])


def summarize(lines, metric):
    by = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in lines:
        if r.get("pair") and r.get("system"):
            by[r["pair"]][r["system"]].append(r)
    out = {}
    for pair, systems in by.items():
        hp50_a, hp99_a, tput_a = hp_values(systems.get("hp-alone", []), metric)
        be_a = be_value(systems.get("be-alone", []))
        some = next(iter(systems.values()))[0]
        solo = median([((r.get("hp") or {}).get("service_us") or {}).get("mean") for r in systems.get("hp-solo", [])])
        rows = {}
        budgets = sorted((s for s in systems if re.fullmatch(r"tally-budget-[0-9.]+x", s)),
                         key=lambda s: float(s[len("tally-budget-"):-1]))
        names = [s for s in BASELINES if s in systems] + [s for s in ORDER if s in systems] + budgets
        names += sorted(s for s in systems if s not in names and s != "hp-solo")
        for s in names:
            recs = systems[s]
            p50, p99, tput = hp_values(recs, metric)
            be = be_value(recs)
            ok = sum(1 for r in recs if r.get("hp") or r.get("be"))  # runs with results
            row = {"kind": "baseline" if s in BASELINES else "system", "n": ok, "runs": len(recs),
                   "hp_p50_us": p50, "hp_p99_us": p99, "hp_throughput": tput, "be_iterations_per_s": be,
                   "hp_p50_x_alone": ratio(p50, hp50_a), "hp_p99_x_alone": ratio(p99, hp99_a),
                   "hp_throughput_x_alone": ratio(tput, tput_a), "be_x_alone": ratio(be, be_a)}
            if row["kind"] == "system":
                hx, bx = row["hp_throughput_x_alone"], row["be_x_alone"]
                row["system_throughput"] = hx + bx if hx is not None and bx is not None else None
            rows[s] = row
        out[pair] = {"hp_model": some.get("hp_model"), "be_model": some.get("be_model"),
                     "rho": some.get("rho"), "rate": median([r.get("rate") for r in systems.get("hp-alone", [])]),
                     "hp_solo_mean_service_us": solo, "seconds": some.get("seconds"), "lead": some.get("lead"),
                     "systems": rows}
    return out


def fmt_ms(us):
    return "—" if us is None else f"{us / 1e3:.2f} ms"


def fmt_x(x):
    return "" if x is None else f" ({x:.2f}×)"


def markdown(summary, metric):
    out = ["## PyTorch pairs: inference (high priority) next to training (best-effort)", ""]
    out.append(f"HP latency = {'response time (completion − scheduled arrival)' if metric == 'response' else 'service time (completion − start)'}; "
               "×alone = ratio to the same figure of the job alone, natively. System throughput = HP throughput ÷ HP alone "
               "+ BE throughput ÷ BE alone (2.0 = both as fast as alone). Runs: bench/pytorch_pairs/run.sh.")
    for pair, p in summary.items():
        out += ["", f"### {pair}: {MODELS.get(p['hp_model'], p['hp_model'])} + {BE_MODELS.get(p['be_model'], p['be_model'])}", ""]
        solo = p["hp_solo_mean_service_us"]
        rate = p["rate"]
        out.append(f"HP open-loop Poisson at {rate:.1f} requests/s" if rate else "HP rate unknown")
        out[-1] += (f" (ρ {p['rho']} of its solo mean service {solo / 1e3:.2f} ms)" if solo else "")
        out[-1] += f"; window {p['seconds']:g} s after a {p['lead']:g} s BE lead." if p.get("seconds") else "."
        out += ["", "| system | HP p50 | HP p99 | BE iterations/s | system throughput |", "|---|---|---|---|---|"]
        for s, r in p["systems"].items():
            be = "—" if r["be_iterations_per_s"] is None else f"{r['be_iterations_per_s']:.2f}{fmt_x(r['be_x_alone'])}"
            st = r.get("system_throughput")
            st = "" if r["kind"] == "baseline" else ("—" if st is None else f"{st:.2f}")
            hp50 = "" if r["hp_p50_us"] is None and s.endswith("be-alone") else fmt_ms(r["hp_p50_us"]) + fmt_x(r["hp_p50_x_alone"])
            hp99 = "" if r["hp_p99_us"] is None and s.endswith("be-alone") else fmt_ms(r["hp_p99_us"]) + fmt_x(r["hp_p99_x_alone"])
            if s.endswith("hp-alone"):
                be = ""
            name = LABELS.get(s, budget_label(s)) + (f" (n={r['n']})" if r["runs"] > 1 else "")
            if r["kind"] == "baseline":
                name = f"*{name}*"
            out.append(f"| {name} | {hp50} | {hp99} | {be} | {st} |")
        if not any(r["n"] for r in p["systems"].values()):
            out += ["", "No run of this pair produced results (see clients.log)."]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--metric", choices=["response", "service"], default="response")
    args = ap.parse_args()
    lines = []
    with open(args.runs) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                lines.append(json.loads(line))
            except ValueError:
                print(f"report.py: {args.runs}:{n}: not JSON, skipped", file=sys.stderr)
    summary = summarize(lines, args.metric)
    md = markdown(summary, args.metric)
    sys.stdout.write(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"metric": args.metric, "pairs": summary}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
