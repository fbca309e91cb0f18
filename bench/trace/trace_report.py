#!/usr/bin/env python3
"""Where a synchronous call's time goes: joins a client trace (TALLY_TRACE=FILE) and tallyd's
(--trace-calls FILE) by (tenant, call id) and prints per-stage latencies by call kind, p50/p90/p99
in microseconds. Both sides stamp CLOCK_MONOTONIC, so the files must come from one host.

Stages (common/trace/call_trace.h):
  client_in client enter -> send           the client's own work before the send (checks, packing)
  write     client send -> sent            the client's socket write
  to_server client send -> tallyd read      frame on the wire, tallyd's thread picks it up
  handle    tallyd read -> handled          decode, checks, driver submission
  submit    tallyd read -> submitted        of which: up to the work queued on the GPU
  gpu       tallyd submitted -> reply       of which: the GPU's part, until the reply is queued
  gpu_wait  tallyd handled -> reply         waiting for the GPU (completion) before answering
  to_client tallyd reply -> client replied  reply on the wire, the client's receiver thread
  wake      client replied -> woken         the calling thread resumes
  client_out client woken -> returned       the client's own work after the wake-up
  total     client send -> woken
  api_total client enter -> returned        the application's whole call

Usage: trace_report.py CLIENT_TRACE TALLYD_TRACE [--json OUT]   |   trace_report.py --self-test
"""
import json
import sys
from collections import defaultdict

STAGES = [("client_in", "enter", "send"), ("write", "send", "sent"), ("to_server", "send", "read"),
          ("handle", "read", "handled"), ("submit", "read", "submitted"), ("gpu", "submitted", "reply"),
          ("gpu_wait", "handled", "reply"), ("to_client", "reply", "replied"), ("wake", "replied", "woken"),
          ("client_out", "woken", "returned"), ("total", "send", "woken"), ("api_total", "enter", "returned")]


def read_events(lines):
    """(tenant, id) -> {stage: ns}, and (tenant, id) -> call kind (the client's, else tallyd's)."""
    times, kinds = defaultdict(dict), {}
    for line in lines:
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 6:
            continue
        _side, tenant, call_id, kind, stage, ns = parts
        key = (int(tenant), int(call_id))
        if int(call_id) == 0:  # one-way calls have no reply to join
            continue
        times[key][stage] = int(ns)
        if int(kind) >= 0:
            kinds.setdefault(key, int(kind))
    return times, kinds


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


def report(times, kinds):
    by_kind = defaultdict(lambda: defaultdict(list))
    for key, t in times.items():
        for name, start, end in STAGES:
            if start in t and end in t:
                by_kind[kinds.get(key, -1)][name].append((t[end] - t[start]) / 1000.0)
    out = {}
    for kind, stages in sorted(by_kind.items()):
        out[str(kind)] = {name: {"n": len(v), "p50": percentile(v, 50), "p90": percentile(v, 90),
                                 "p99": percentile(v, 99)} for name, v in stages.items()}
    return out


def print_table(summary):
    for kind, stages in summary.items():
        print(f"call kind {kind} (wire::Call discriminant)")
        print(f"  {'stage':10} {'n':>7} {'p50 us':>9} {'p90 us':>9} {'p99 us':>9}")
        for name, _, _ in STAGES:
            if name in stages:
                s = stages[name]
                print(f"  {name:10} {s['n']:>7} {s['p50']:>9.2f} {s['p90']:>9.2f} {s['p99']:>9.2f}")


def self_test():
    lines = []
    for i in range(1, 11):  # call i: write 1 us, wire 2, handle 3, GPU 4+i, wire 5, wake 6
        base = i * 1_000_000
        for side, stage, at in (("client", "send", 0), ("client", "sent", 1), ("tallyd", "read", 2),
                                ("tallyd", "handled", 5), ("tallyd", "reply", 9 + i), ("client", "replied", 14 + i),
                                ("client", "woken", 20 + i)):
            kind = 3 if side == "client" else (3 if stage != "reply" else -1)
            lines.append(f"{side}\t7\t{i}\t{kind}\t{stage}\t{base + at * 1000}\n")
    lines.append("client\t7\t0\t28\tsend\t5\n")  # one-way: ignored
    lines.append("garbage line\n")
    summary = report(*read_events(lines))
    s = summary["3"]
    checks = [s["write"]["p50"] == 1.0, s["to_server"]["p50"] == 2.0, s["handle"]["p50"] == 3.0,
              s["gpu_wait"]["p50"] == 4.0 + 6, s["to_client"]["p50"] == 5.0, s["wake"]["p50"] == 6.0,
              s["total"]["n"] == 10, s["total"]["p99"] == 30.0, "28" not in summary]
    if not all(checks):
        print("self-test FAILED:", checks, json.dumps(summary, indent=1))
        return 1
    print("self-test passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 3:
        print(__doc__)
        return 2
    lines = []
    for path in argv[1:3]:
        with open(path, encoding="utf-8") as f:
            lines.extend(f)
    summary = report(*read_events(lines))
    print_table(summary)
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w", encoding="utf-8") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
