#!/usr/bin/env python3
"""Compares PyTorch suite case outputs (tests/pytorch/cases/suite_common.py describes them).
Standard library only: it runs where torch is not installed.

  compare.py REF.out GOT.out [--ref-rc N] [--got-rc N] [--floor-rtol R] [--floor-atol A]
      REF is the native run's stdout, GOT a run through tallyd. Prints "PASS ..." or
      "FAIL <reason>" as the first line, details after it. Exit 0 pass, 1 fail (no result,
      a failed step, a non-zero exit), 3 fail because values differ.
  compare.py --check OUT [--got-rc N]
      One run on its own (the native reference): every step passed, exit status 0.
  compare.py --summarize RESULTS.tsv --out FILE.json [--extra KEY=VALUE ...]
      The runner's tab-separated PASS/FAIL lines as a JSON summary.
  compare.py --self-test
      Checks this comparer on crafted outputs, including ones that must fail.

Rules: a step's "result" must have the native run's structure (same keys, list lengths,
types). Steps with "tol": null compare bit for bit (floats by their IEEE bits: -0.0 != 0.0,
NaN == NaN). Steps with {"rtol", "atol"} let floats differ by atol + rtol*|native|; ints,
bools, strings and None stay exact. --floor-rtol/--floor-atol raise every step's tolerance
(diagnosis only; the default is 0).
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile

EXIT_PASS, EXIT_FAIL, EXIT_DIFFER = 0, 1, 3


def load_result(path):
    """The case's JSON object: the last stdout line that parses as {"case": ..., "steps": ...}.
    Returns (doc, None) or (None, reason)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return None, f"cannot read {path}: {e.strerror}"
    for line in reversed(lines):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "case" in doc and isinstance(doc.get("steps"), list):
            return doc, None
    tail = " | ".join(l.strip() for l in lines[-3:] if l.strip())
    return None, "no JSON result line in stdout" + (f" (last lines: {tail[:300]})" if tail else " (stdout empty)")


def float_bits(x):
    if math.isnan(x):
        return "nan"  # every NaN counts as the same value
    return struct.pack("<d", x)


def fmt(x):
    return repr(x) if not isinstance(x, str) else json.dumps(x[:80])


class Differ:
    def __init__(self, rtol, atol, limit=8):
        self.rtol, self.atol, self.limit = rtol, atol, limit
        self.diffs = []
        self.count = 0

    def add(self, path, msg):
        self.count += 1
        if len(self.diffs) < self.limit:
            self.diffs.append(f"{path}: {msg}")

    def walk(self, path, ref, got):
        tolerant = self.rtol > 0 or self.atol > 0
        if isinstance(ref, dict) and isinstance(got, dict):
            missing, extra = sorted(set(ref) - set(got)), sorted(set(got) - set(ref))
            if missing or extra:
                self.add(path, f"keys differ (missing {missing}, unexpected {extra})")
            for k in ref:
                if k in got:
                    self.walk(f"{path}.{k}", ref[k], got[k])
        elif isinstance(ref, list) and isinstance(got, list):
            if len(ref) != len(got):
                self.add(path, f"length {len(got)}, native {len(ref)}")
            for i, (r, g) in enumerate(zip(ref, got)):
                self.walk(f"{path}[{i}]", r, g)
        elif isinstance(ref, bool) or isinstance(got, bool) or ref is None or got is None or \
                isinstance(ref, str) or isinstance(got, str):
            if type(ref) is not type(got) or ref != got:
                self.add(path, f"{fmt(got)}, native {fmt(ref)}")
        elif isinstance(ref, (int, float)) and isinstance(got, (int, float)):
            if isinstance(ref, int) and isinstance(got, int):
                if ref != got:
                    self.add(path, f"{got}, native {ref} (integers compare exactly)")
            elif not tolerant:
                if type(ref) is not type(got) or float_bits(float(ref)) != float_bits(float(got)):
                    d = abs(float(got) - float(ref)) if math.isfinite(float(got) - float(ref)) else float("nan")
                    self.add(path, f"{got!r}, native {ref!r} (bitwise; |diff| {d:.3g})")
            else:
                r, g = float(ref), float(got)
                if math.isnan(r) or math.isnan(g) or math.isinf(r) or math.isinf(g):
                    if float_bits(r) != float_bits(g):
                        self.add(path, f"{g!r}, native {r!r}")
                else:
                    allowed = self.atol + self.rtol * abs(r)
                    if abs(g - r) > allowed:
                        self.add(path, f"{g!r}, native {r!r} (|diff| {abs(g - r):.3g} > {allowed:.3g} = "
                                       f"atol {self.atol:g} + rtol {self.rtol:g}*|native|)")
        else:
            self.add(path, f"type {type(got).__name__}, native {type(ref).__name__}")


def failed_steps(doc):
    return [s for s in doc["steps"] if not s.get("ok")]


def step_errors(steps, limit=4):
    parts = [f"{s.get('name')}: {s.get('error') or 'failed'}" for s in steps[:limit]]
    more = f" (+{len(steps) - limit} more)" if len(steps) > limit else ""
    return "; ".join(parts) + more


def check(doc, err, rc):
    """(exit code, first line, detail lines) for one run on its own."""
    if doc is None:
        return EXIT_FAIL, f"FAIL {err}" + (f" (exit status {rc})" if rc not in (None, 0) else ""), []
    bad = failed_steps(doc)
    if bad:
        return EXIT_FAIL, f"FAIL {len(bad)} of {len(doc['steps'])} step(s) failed: {step_errors(bad)}", \
            [f"step {s.get('name')}: {s.get('error')}" for s in bad]
    if not doc["steps"]:
        return EXIT_FAIL, "FAIL the case ran no steps", []
    if rc not in (None, 0):
        return EXIT_FAIL, f"FAIL exit status {rc} after all {len(doc['steps'])} steps passed", []
    return EXIT_PASS, f"PASS {len(doc['steps'])} steps", []


def compare(ref, ref_err, got, got_err, ref_rc=None, got_rc=None, floor_rtol=0.0, floor_atol=0.0):
    """(exit code, first line, detail lines) for a run against the native reference."""
    code, line, _ = check(ref, ref_err, ref_rc)
    if code != EXIT_PASS:
        return EXIT_FAIL, "FAIL native reference unusable: " + line[5:], []
    code, line, details = check(got, got_err, got_rc)
    if got is None:
        return code, line, details
    if got.get("case") != ref.get("case"):
        return EXIT_FAIL, f"FAIL result is for case {got.get('case')!r}, native for {ref.get('case')!r}", []
    ref_steps = {s["name"]: s for s in ref["steps"]}
    got_steps = {s["name"]: s for s in got["steps"]}
    missing = [n for n in ref_steps if n not in got_steps]
    extra = [n for n in got_steps if n not in ref_steps]
    if missing or extra:
        return EXIT_FAIL, f"FAIL steps differ from native: missing {missing}, unexpected {extra}", []
    if code != EXIT_PASS:
        return code, line, details
    lines, differing = [], []
    total = 0
    for name, rs in ref_steps.items():
        gs = got_steps[name]
        if rs.get("tol") != gs.get("tol"):
            return EXIT_FAIL, f"FAIL step {name}: tolerance {gs.get('tol')} differs from native {rs.get('tol')} " \
                              "(different case versions?)", []
        tol = rs.get("tol") or {}
        d = Differ(max(float(tol.get("rtol", 0.0)), floor_rtol), max(float(tol.get("atol", 0.0)), floor_atol))
        d.walk(name, rs.get("result"), gs.get("result"))
        if d.count:
            differing.append(name)
            total += d.count
            kind = "bitwise" if not (d.rtol or d.atol) else f"rtol {d.rtol:g} atol {d.atol:g}"
            lines.append(f"step {name} ({kind}): {d.count} value(s) differ")
            lines.extend("  " + x for x in d.diffs)
            if d.count > len(d.diffs):
                lines.append(f"  ... {d.count - len(d.diffs)} more")
    if differing:
        first = next(l.strip() for l in lines if l.startswith("  "))
        return EXIT_DIFFER, f"FAIL values differ from native in step(s) {', '.join(differing)} " \
                            f"({total} value(s); first: {first})", lines
    n_tol = sum(1 for s in ref["steps"] if s.get("tol"))
    return EXIT_PASS, f"PASS {len(ref_steps)} steps match native ({len(ref_steps) - n_tol} bitwise, " \
                      f"{n_tol} within tolerance)", []


def summarize(tsv, out, extra):
    rows = []
    with open(tsv, encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                continue
            parts += [""] * (5 - len(parts))
            status, case, transport, seconds, reason = parts[:5]
            rows.append({"status": status, "case": case, "transport": transport,
                         "seconds": float(seconds) if seconds else None, "reason": reason})
    doc = {"passed": sum(r["status"] == "PASS" for r in rows), "failed": sum(r["status"] == "FAIL" for r in rows),
           "results": rows}
    for kv in extra:
        k, _, v = kv.partition("=")
        doc[k] = v
    doc["ok"] = doc["failed"] == 0 and doc["passed"] > 0
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)
    return doc


# ------------------------------------------------------------------------------ self-test

def _doc(steps, case="demo"):
    return {"case": case, "ok": all(s.get("ok", True) for s in steps), "info": {"pid": 1},
            "steps": [dict({"ok": True, "error": None, "tol": None, "seconds": 0.1}, **s) for s in steps]}


def self_test():
    ulp = math.nextafter(1.0, 2.0)
    base = [{"name": "exact", "result": {"sha256": "ab", "v": [1.0, 2.5, float("nan")], "n": 3, "b": True, "z": None}},
            {"name": "tol", "tol": {"rtol": 1e-3, "atol": 1e-6}, "result": {"loss": [2.0, 1.5], "ids": [5, 6]}}]

    def variant(**changes):
        steps = json.loads(json.dumps(base))
        for path, value in changes.items():
            step, *keys = path.split("__")
            target = next(s for s in steps if s["name"] == step)
            if keys == ["STEP"]:
                target.update(value)
                continue
            node = target["result"]
            for k in keys[:-1]:
                node = node[int(k)] if isinstance(node, list) else node[k]
            last = keys[-1]
            if isinstance(node, list):
                node[int(last)] = value
            elif value is KeyError:
                del node[last]
            else:
                node[last] = value
        return _doc(steps)

    ref = _doc(json.loads(json.dumps(base)))
    T = [  # (label, got document or raw text, expected exit code, text the reason must contain)
        ("identical", variant(), EXIT_PASS, "match native"),
        ("NaN equals NaN", variant(exact__v__2=float("nan")), EXIT_PASS, ""),
        ("one ulp off in a bitwise step", variant(exact__v__0=ulp), EXIT_DIFFER, "exact.v[0]"),
        ("-0.0 vs 0.0 in a bitwise step", None, EXIT_DIFFER, "bitwise"),
        ("int 1 vs float 1.0 in a bitwise step", variant(exact__v__0=1), EXIT_DIFFER, "exact.v[0]"),
        ("digest differs", variant(exact__sha256="cd"), EXIT_DIFFER, "sha256"),
        ("bool differs", variant(exact__b=False), EXIT_DIFFER, "exact.b"),
        ("None vs 0", variant(exact__z=0), EXIT_DIFFER, "exact.z"),
        ("NaN vs number", variant(exact__v__2=1.0), EXIT_DIFFER, "exact.v[2]"),
        ("int differs", variant(exact__n=4), EXIT_DIFFER, "integers"),
        ("within tolerance", variant(tol__loss__0=2.0015), EXIT_PASS, "within tolerance"),
        ("outside tolerance", variant(tol__loss__0=2.003), EXIT_DIFFER, "tol.loss[0]"),
        ("int exact under tolerance", variant(tol__ids__1=7), EXIT_DIFFER, "tol.ids[1]"),
        ("missing key", variant(exact__n=KeyError), EXIT_DIFFER, "keys differ"),
        ("list length", variant(tol__ids=[5]), EXIT_DIFFER, "length"),
        ("failed step", variant(tol__STEP={"ok": False, "error": "RuntimeError: CUBLAS_STATUS_NOT_INITIALIZED"}),
         EXIT_FAIL, "CUBLAS_STATUS_NOT_INITIALIZED"),
        ("missing step", _doc([json.loads(json.dumps(base[0]))]), EXIT_FAIL, "missing ['tol']"),
        ("tolerance changed", variant(tol__STEP={"tol": {"rtol": 0.5, "atol": 0}}), EXIT_FAIL, "tolerance"),
        ("other case", _doc(json.loads(json.dumps(base)), case="other"), EXIT_FAIL, "case"),
        ("no JSON", "Segmentation fault\n", EXIT_FAIL, "no JSON"),
        ("JSON not last, junk after", "noise\n" + json.dumps(variant()) + "\nexit handler output\n", EXIT_PASS, ""),
        ("non-zero exit", variant(), EXIT_FAIL, "exit status 139"),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        def write(name, content):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(content if isinstance(content, str) else "log line\n" + json.dumps(content) + "\n")
            return p

        ref_path = write("ref", ref)
        for label, got, want, needle in T:
            if label.startswith("-0.0"):
                got = variant(exact__v__0=1.0)
                ref_zero = json.loads(json.dumps(ref))
                ref_zero["steps"][0]["result"]["v"][0] = 0.0
                got["steps"][0]["result"]["v"][0] = -0.0
                rp = write("ref0", ref_zero)
            else:
                rp = ref_path
            gp = write("got", got)
            rc = 139 if label == "non-zero exit" else 0
            r, rerr = load_result(rp)
            g, gerr = load_result(gp)
            code, line, _ = compare(r, rerr, g, gerr, 0, rc)
            ok = code == want and needle in line
            failures += not ok
            print(f"{'ok    ' if ok else 'FAILED'} {label}: exit {code} (want {want}): {line}")
        # The floor tolerance lets a bitwise difference pass (diagnosis option).
        r, _ = load_result(ref_path)
        g, _ = load_result(write("got", variant(exact__v__0=ulp)))
        code, line, _ = compare(r, None, g, None, floor_rtol=1e-9)
        ok = code == EXIT_PASS
        failures += not ok
        print(f"{'ok    ' if ok else 'FAILED'} floor tolerance: exit {code} (want 0): {line}")
        # A failing native reference fails the comparison even if the other run passed.
        bad_ref = _doc([dict(base[0], ok=False, error="boom"), base[1]])
        r, _ = load_result(write("badref", bad_ref))
        g, _ = load_result(write("got", variant()))
        code, line, _ = compare(r, None, g, None)
        ok = code == EXIT_FAIL and "native reference unusable" in line and "boom" in line
        failures += not ok
        print(f"{'ok    ' if ok else 'FAILED'} failing native reference: exit {code}: {line}")
        # --check on its own, and the summary.
        code, line, _ = check(*load_result(write("c", variant())), 0)
        code2, line2, _ = check(*load_result(write("c", bad_ref)), 0)
        ok = code == EXIT_PASS and code2 == EXIT_FAIL and "boom" in line2
        failures += not ok
        print(f"{'ok    ' if ok else 'FAILED'} --check: {line} / {line2}")
        tsv = write("r.tsv", "PASS\ta\tnative\t1.5\t\nFAIL\ta\tuds\t2.0\tstep x failed\n")
        s = summarize(tsv, os.path.join(d, "s.json"), ["suite=pytorch"])
        ok = s["passed"] == 1 and s["failed"] == 1 and not s["ok"] and s["results"][1]["reason"] == "step x failed"
        failures += not ok
        print(f"{'ok    ' if ok else 'FAILED'} --summarize: {s['passed']} passed, {s['failed']} failed")
    print(f"self-test: {'all passed' if not failures else f'{failures} FAILED'}")
    return 0 if failures == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--summarize", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--ref-rc", type=int)
    ap.add_argument("--got-rc", type=int)
    ap.add_argument("--floor-rtol", type=float, default=0.0)
    ap.add_argument("--floor-atol", type=float, default=0.0)
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if a.summarize:
        if len(a.files) != 1 or not a.out:
            ap.error("--summarize RESULTS.tsv --out FILE")
        doc = summarize(a.files[0], a.out, a.extra)
        print(f"wrote {a.out}: {doc['passed']} passed, {doc['failed']} failed")
        return 0
    if a.check:
        if len(a.files) != 1:
            ap.error("--check OUT")
        code, line, details = check(*load_result(a.files[0]), a.got_rc)
    else:
        if len(a.files) != 2:
            ap.error("REF.out GOT.out")
        ref, ref_err = load_result(a.files[0])
        got, got_err = load_result(a.files[1])
        code, line, details = compare(ref, ref_err, got, got_err, a.ref_rc, a.got_rc, a.floor_rtol, a.floor_atol)
    print(line)
    for d in details:
        print(d)
    return code


if __name__ == "__main__":
    sys.exit(main())
