#!/usr/bin/env python3
"""PyTorch benchmarks, run by bench/pytorch/run.sh natively and through tallyd (UDS, TCP).

  torch_bench.py all --out FILE.json [--label MODE] [--log FILE]
      every measure, each in a fresh child process (a failing measure, e.g. one whose CUDA
      calls are not supported through tallyd, cannot spoil the next); writes one JSON document.
  torch_bench.py one MEASURE      one measure in this process; prints "@@result {json}" lines
  torch_bench.py probe-first-op   one timed start-up (used by the first_op measure)

Measures (TORCH_BENCH_MEASURES, default all, in this order):
  first_op        fresh process per repeat: time from just before `import torch` to after
                  torch.ones(1, device="cuda").item() (also: import alone, CUDA part alone)
  item_rtt        .item() of a 1-element CUDA tensor (a D2H copy + sync), and (x + 1).item()
  train_resnet50  ResNet-50 training step, SGD, fp32                 (synchronize per step)
  train_bert      BERT-base (BertForMaskedLM) training step, AdamW, fp32
  train_gpt2      GPT-2 small training step, AdamW, bf16 autocast
  infer_resnet50  ResNet-50 inference latency per batch size        (synchronize per request)
  infer_bert      BERT-base encoder (BertModel) inference latency per batch size
Warm-up steps/requests are excluded. Statistics: median, p10, p90 (+ p99 for latencies).

Environment (defaults in brackets): TORCH_BENCH_MEASURES [all], TORCH_BENCH_FIRST_OP_REPEATS [5],
TORCH_BENCH_ITEM_REPEATS [2000], TORCH_BENCH_WARMUP_STEPS [5], TORCH_BENCH_STEPS [20],
TORCH_BENCH_INFER_WARMUP [10], TORCH_BENCH_INFER_REQUESTS [200],
TORCH_BENCH_RESNET_TRAIN_BS [32], TORCH_BENCH_BERT_TRAIN_BS [8], TORCH_BENCH_BERT_SEQ [128],
TORCH_BENCH_GPT2_TRAIN_BS [4], TORCH_BENCH_GPT2_SEQ [512], TORCH_BENCH_RESNET_INFER_BS ["1 32"],
TORCH_BENCH_BERT_INFER_BS ["1 16"], TORCH_BENCH_CUDNN_BENCHMARK [0],
TORCH_BENCH_TIMEOUT_S [150] per measure, TORCH_BENCH_DEADLINE_S [240] for all measures (what is
left after it is recorded as skipped), TORCH_BENCH_CLIENT_STATS_DIR (set by run.sh when the
client knows TALLY_CLIENT_STATS: each measure's child gets TALLY_CLIENT_STATS=<dir>/<measure>).
"""

import json
import os
import platform
import subprocess
import sys
import time

MEASURES = ["first_op", "item_rtt", "train_resnet50", "train_bert", "train_gpt2", "infer_resnet50", "infer_bert"]


def env_int(name, default):
    return int(os.environ.get("TORCH_BENCH_" + name, default))


def env_ints(name, default):
    return [int(x) for x in os.environ.get("TORCH_BENCH_" + name, default).split()]


def params():
    return {k: os.environ.get("TORCH_BENCH_" + k, d) for k, d in [
        ("FIRST_OP_REPEATS", "5"), ("ITEM_REPEATS", "2000"), ("WARMUP_STEPS", "5"), ("STEPS", "20"),
        ("INFER_WARMUP", "10"), ("INFER_REQUESTS", "200"), ("RESNET_TRAIN_BS", "32"), ("BERT_TRAIN_BS", "8"),
        ("BERT_SEQ", "128"), ("GPT2_TRAIN_BS", "4"), ("GPT2_SEQ", "512"), ("RESNET_INFER_BS", "1 32"),
        ("BERT_INFER_BS", "1 16"), ("CUDNN_BENCHMARK", "0"), ("TIMEOUT_S", "150"), ("DEADLINE_S", "240")]}


def pct(xs, q):
    """Percentile with linear interpolation (q in 0..100)."""
    s = sorted(xs)
    if not s:
        return None
    k = (len(s) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def stats(samples, unit, scale, p99=False):
    xs = [x * scale for x in samples]
    out = {"unit": unit, "n": len(xs), "median": pct(xs, 50), "p10": pct(xs, 10), "p90": pct(xs, 90),
           "min": min(xs) if xs else None, "max": max(xs) if xs else None}
    if p99:
        out["p99"] = pct(xs, 99)
    return out


class ClientCounters:
    """What the preloaded client sent (tallyClientStats: messages, round trips, bytes), per step of
    the last measured loop; None natively."""

    def __init__(self):
        import ctypes
        self.values = (ctypes.c_uint64 * 3)()
        try:
            self.fn = ctypes.CDLL(None).tallyClientStats
        except AttributeError:
            self.fn = None
        self.per_step = None

    def read(self):
        return list(self.values) if self.fn is not None and self.fn(self.values) == 0 else None

    def measure(self, before, after, steps):
        if before is None or after is None or steps == 0:
            self.per_step = None
        else:
            self.per_step = {k: (a - b) / steps for k, a, b in zip(("messages", "round_trips", "bytes_sent"), after, before)}


COUNTERS = ClientCounters()


def emit(bench, variant, metric, st, **extra):
    if COUNTERS.per_step is not None:
        extra["client_per_step"] = COUNTERS.per_step
    rec = dict({"bench": bench, "variant": variant, "metric": metric}, **st, **extra)
    print("@@result " + json.dumps(rec), flush=True)


# ------------------------------------------------------------------ measures (child side)

def setup_torch():
    import torch
    torch.backends.cudnn.benchmark = env_int("CUDNN_BENCHMARK", 0) == 1
    torch.manual_seed(0)
    x = torch.ones(1, device="cuda")  # CUDA initialised before anything is timed
    x.item()
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0),
            "cudnn": torch.backends.cudnn.version(), "cudnn_benchmark": torch.backends.cudnn.benchmark}
    print("@@info " + json.dumps(info), flush=True)
    return torch


def timed_steps(torch, step, warmup, steps):
    """Per-step wall times (s), each ended by torch.cuda.synchronize(); warm-up not returned."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    before = COUNTERS.read()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    COUNTERS.measure(before, COUNTERS.read(), steps)
    return times


def probe_first_op():
    t0 = time.perf_counter()
    import torch
    t1 = time.perf_counter()
    torch.ones(1, device="cuda").item()
    t2 = time.perf_counter()
    print(json.dumps({"first_op_s": t2 - t0, "import_s": t1 - t0, "cuda_first_op_s": t2 - t1}), flush=True)


def m_first_op():
    n = env_int("FIRST_OP_REPEATS", 5)
    runs, walls = [], []
    for i in range(n):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "probe-first-op"], capture_output=True,
                           text=True, timeout=env_int("TIMEOUT_S", 150))
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise RuntimeError(f"probe {i} exited {p.returncode}: {p.stderr.strip()[-500:]}")
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first = runs[0]["first_op_s"]  # the first process may also fill tallyd's module cache
    emit("first_op", "import+first op", "time", stats([r["first_op_s"] for r in runs], "s", 1.0), first_repeat_s=first)
    emit("first_op", "import torch", "time", stats([r["import_s"] for r in runs], "s", 1.0))
    emit("first_op", "first CUDA op", "time", stats([r["cuda_first_op_s"] for r in runs], "s", 1.0))
    emit("first_op", "process wall", "time", stats(walls, "s", 1.0))


def m_item_rtt():
    torch = setup_torch()
    n = env_int("ITEM_REPEATS", 2000)
    x = torch.ones(1, device="cuda")
    for label, fn in (("item", lambda: x.item()), ("add+item", lambda: (x + 1).item())):
        for _ in range(min(100, n)):
            fn()
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        emit("item_rtt", label, "latency", stats(times, "us", 1e6, p99=True))


def resnet50_train_step(torch, bs):
    """One SGD step of ResNet-50 on a fixed random batch; the step returns the loss (on the GPU).
    Shared with bench/pytorch_pairs/workload.py."""
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(bs, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (bs,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def m_train_resnet50():
    torch = setup_torch()
    bs = env_int("RESNET_TRAIN_BS", 32)
    step = resnet50_train_step(torch, bs)
    t = timed_steps(torch, step, env_int("WARMUP_STEPS", 5), env_int("STEPS", 20))
    st = stats(t, "ms", 1e3)
    emit("train_resnet50", f"bs{bs}", "step time", st, throughput=bs / (st["median"] / 1e3), throughput_unit="images/s")


def m_train_bert():
    torch = setup_torch()
    import transformers
    bs, seq = env_int("BERT_TRAIN_BS", 8), env_int("BERT_SEQ", 128)
    config = transformers.BertConfig()
    model = transformers.BertForMaskedLM(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (bs, seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    t = timed_steps(torch, step, env_int("WARMUP_STEPS", 5), env_int("STEPS", 20))
    st = stats(t, "ms", 1e3)
    emit("train_bert", f"bs{bs} seq{seq}", "step time", st, throughput=bs / (st["median"] / 1e3),
         throughput_unit="sequences/s")


def gpt2_train_step(torch, bs, seq):
    """One AdamW step of GPT-2 small (bf16 autocast) on fixed random tokens; the step returns the
    loss (on the GPU). Shared with bench/pytorch_pairs/workload.py."""
    import transformers
    config = transformers.GPT2Config()
    model = transformers.GPT2LMHeadModel(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (bs, seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss
    return step


def m_train_gpt2():
    torch = setup_torch()
    bs, seq = env_int("GPT2_TRAIN_BS", 4), env_int("GPT2_SEQ", 512)
    step = gpt2_train_step(torch, bs, seq)
    t = timed_steps(torch, step, env_int("WARMUP_STEPS", 5), env_int("STEPS", 20))
    st = stats(t, "ms", 1e3)
    emit("train_gpt2", f"bs{bs} seq{seq} bf16", "step time", st, throughput=bs * seq / (st["median"] / 1e3),
         throughput_unit="tokens/s")


def latency(torch, name, variant, fn):
    times = timed_steps(torch, fn, env_int("INFER_WARMUP", 10), env_int("INFER_REQUESTS", 200))
    emit(name, variant, "latency", stats(times, "ms", 1e3, p99=True))


def m_infer_resnet50():
    torch = setup_torch()
    import torchvision
    model = torchvision.models.resnet50(weights=None).cuda().eval()
    for bs in env_ints("RESNET_INFER_BS", "1 32"):
        x = torch.randn(bs, 3, 224, 224, device="cuda")
        with torch.inference_mode():
            latency(torch, "infer_resnet50", f"bs{bs}", lambda: model(x))


def m_infer_bert():
    torch = setup_torch()
    import transformers
    seq = env_int("BERT_SEQ", 128)
    config = transformers.BertConfig()
    model = transformers.BertModel(config).cuda().eval()
    for bs in env_ints("BERT_INFER_BS", "1 16"):
        ids = torch.randint(0, config.vocab_size, (bs, seq), device="cuda")
        with torch.inference_mode():
            latency(torch, "infer_bert", f"bs{bs} seq{seq}", lambda: model(input_ids=ids))


# ------------------------------------------------------------------ orchestration (parent side)

def read_stats(path):
    """The client's statistics file, if it wrote one: JSON if it parses, else its lines."""
    if not path or not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        return text.splitlines()[-50:]


def run_all(out, label, log):
    wanted = os.environ.get("TORCH_BENCH_MEASURES", " ".join(MEASURES)).split()
    unknown = [m for m in wanted if m not in MEASURES]
    if unknown:
        sys.exit(f"torch_bench.py: unknown measure(s) {unknown}; known: {MEASURES}")
    deadline = time.monotonic() + env_int("DEADLINE_S", 240)
    stats_dir = os.environ.get("TORCH_BENCH_CLIENT_STATS_DIR")
    doc = {"label": label, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "host": {"hostname": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count()},
           "through_tally": "libtally_client" in os.environ.get("LD_PRELOAD", ""),
           "tally_server": os.environ.get("TALLY_SERVER") if os.environ.get("LD_PRELOAD") else None,
           "params": params(), "info": None, "results": [], "failures": [],
           # Whole-process totals per measure (TALLY_CLIENT_STATS); per-step figures are each
           # result's client_per_step (tallyClientStats around the measured loop).
           "client_stats_supported": bool(stats_dir)}
    t_start = time.monotonic()
    logf = open(log, "a") if log else sys.stderr
    for m in wanted:
        left = deadline - time.monotonic()
        if left < 5:
            doc["failures"].append({"bench": m, "reason": "skipped: TORCH_BENCH_DEADLINE_S reached"})
            continue
        limit = min(env_int("TIMEOUT_S", 150) * (env_int("FIRST_OP_REPEATS", 5) if m == "first_op" else 1), left)
        env = dict(os.environ)
        stats_path = os.path.join(stats_dir, f"{label}.{m}.stats") if stats_dir else None
        if stats_path:
            env["TALLY_CLIENT_STATS"] = stats_path
        t0 = time.monotonic()
        print(f"torch_bench [{label}] {m} (limit {limit:.0f}s)", file=sys.stderr, flush=True)
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "one", m], capture_output=True,
                               text=True, timeout=limit, env=env)
            rc, stdout, stderr = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = "timeout"
            stdout = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        print(f"===== {label} {m} rc={rc} {time.monotonic() - t0:.1f}s\n{stderr}", file=logf, flush=True)
        client_stats = read_stats(stats_path)
        got = 0
        for line in stdout.splitlines():
            if line.startswith("@@result "):
                rec = json.loads(line[len("@@result "):])
                rec["client_stats"] = client_stats
                doc["results"].append(rec)
                got += 1
            elif line.startswith("@@info ") and doc["info"] is None:
                doc["info"] = json.loads(line[len("@@info "):])
        if rc != 0 or got == 0:
            reason = f"timed out after {limit:.0f}s" if rc == "timeout" else f"exit status {rc}"
            tail = [l for l in stderr.strip().splitlines() if l.strip()][-6:]
            doc["failures"].append({"bench": m, "reason": reason if got == 0 else reason + " (after some results)",
                                    "stderr_tail": tail})
            print(f"torch_bench [{label}] {m} FAILED: {reason}: {tail[-1] if tail else ''}", file=sys.stderr)
    doc["duration_s"] = round(time.monotonic() - t_start, 1)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)
    print(f"torch_bench [{label}] wrote {out}: {len(doc['results'])} results, {len(doc['failures'])} failures "
          f"in {doc['duration_s']}s", file=sys.stderr)
    return 1 if doc["failures"] else 0


def main():
    args = sys.argv[1:]
    if args[:1] == ["probe-first-op"]:
        probe_first_op()
        return 0
    if len(args) == 2 and args[0] == "one" and args[1] in MEASURES:
        globals()["m_" + args[1]]()
        return 0
    if args[:1] == ["all"]:
        import argparse
        ap = argparse.ArgumentParser(prog="torch_bench.py all")
        ap.add_argument("--out", required=True)
        ap.add_argument("--label", default="native")
        ap.add_argument("--log")
        a = ap.parse_args(args[1:])
        return run_all(a.out, a.label, a.log)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
