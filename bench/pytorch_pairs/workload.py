#!/usr/bin/env python3
"""One tenant of a PyTorch isolation pair (bench/pytorch_pairs/run.sh): an inference job (the
high-priority tenant, HP) or a training job (the best-effort tenant, BE). Models have random
weights, built from their configs; nothing is downloaded. Prints one JSON line on stdout.

  workload.py --role hp --model bert|resnet50 --solo S
      closed loop: requests back to back for S seconds after the warm-up; the mean service time
      gives the request rate for a load rho (rate = rho / mean).
  workload.py --role hp --model bert|resnet50 --rate R --seconds S [--seed N]
              [--wait-file W --go-file G]
      open loop: seeded Poisson arrivals at R requests/s for S seconds, one request in flight (a
      request that arrives while the previous one runs waits). With --wait-file, the schedule
      starts only once W exists (the BE is warm), and G is created at its start.
  workload.py --role be --model resnet50|gpt2 --seconds S --lead L [--warm-file W --go-file G]
      training: L seconds uncounted (warm-up), then iterations are counted for S seconds. With
      --warm-file, W is created after the L seconds, and counting starts only once G exists.

HP: batch 1, fp32, eval mode under torch.no_grad(); resnet50 = torchvision ResNet-50 on a
1x3x224x224 image, bert = transformers BertModel(BertConfig()) (BERT-base) on 128 token ids.
A request copies a fresh input (one of 16 made on the CPU beforehand) to the GPU, runs the
forward pass and copies the (small) output back to the CPU, which waits for the GPU.
20 warm-up requests come first. service = end - start, response = end - scheduled arrival (µs).

BE: resnet50 = ResNet-50, batch 32 at 224x224, SGD (momentum 0.9), fp32; gpt2 = GPT2LMHeadModel
(GPT2Config(): GPT-2 small, n_positions 1024), batch 4 x 512 tokens, AdamW, bf16 autocast (as
bench/pytorch/torch_bench.py). Inputs and labels are random, made on the GPU once. Every
iteration reads its loss with .item() (as a training loop that logs its loss), so the CPU never
runs ahead of the GPU by more than one iteration and counted iterations are finished ones.

cuDNN autotuning is off (PyTorch's default) unless --cudnn-benchmark.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

WARMUP_REQUESTS = 20
INPUTS = 16


def summary_us(seconds):
    us = [x * 1e6 for x in seconds]
    if not us:
        return None
    # Percentiles with linear interpolation between the closest ranks.
    cuts = statistics.quantiles(us, n=100, method="inclusive") if len(us) > 1 else us * 99
    return {"p50": round(cuts[49], 1), "p99": round(cuts[98], 1), "mean": round(sum(us) / len(us), 1)}


def touch(path):
    with open(path, "w") as f:
        f.write(f"{time.time():.6f}\n")


def wait_for(path, timeout):
    """Polls until `path` exists; False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def sleep_until(t):
    """Sleeps until perf_counter() reaches t: sleep() for most of it, then spins (~µs accuracy)."""
    d = t - time.perf_counter()
    if d > 0.0005:
        time.sleep(d - 0.0003)
    while time.perf_counter() < t:
        pass


def setup(args):
    import torch
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    torch.manual_seed(args.seed)  # weights are drawn on the CPU
    torch.ones(1, device="cuda").item()  # CUDA initialised before anything else
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0),
            "through_tally": "libtally_client" in os.environ.get("LD_PRELOAD", ""),
            "cudnn_benchmark": torch.backends.cudnn.benchmark}
    print("workload: " + json.dumps(info), file=sys.stderr, flush=True)
    return torch, info


# ------------------------------------------------------------------ HP: inference

def build_hp(torch, model_name):
    """The model (on the GPU, eval mode) and a request function of a CPU input."""
    g = torch.Generator().manual_seed(7)
    if model_name == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None).cuda().eval()
        inputs = [torch.randn(1, 3, 224, 224, generator=g) for _ in range(INPUTS)]

        def request(x):
            with torch.no_grad():
                return model(x.cuda()).cpu()
    else:
        import transformers
        config = transformers.BertConfig()
        model = transformers.BertModel(config).cuda().eval()
        inputs = [torch.randint(1000, config.vocab_size, (1, 128), generator=g) for _ in range(INPUTS)]

        def request(x):
            with torch.no_grad():
                return model(input_ids=x.cuda()).pooler_output.cpu()
    return request, inputs


def run_hp(args):
    torch, info = setup(args)
    request, inputs = build_hp(torch, args.model)
    for i in range(WARMUP_REQUESTS):
        request(inputs[i % INPUTS])
    out = {"role": "hp", "model": args.model}
    service, response = [], []
    if args.solo:
        t0 = time.perf_counter()
        i = 0
        while time.perf_counter() - t0 < args.solo:
            start = time.perf_counter()
            request(inputs[i % INPUTS])
            service.append(time.perf_counter() - start)
            i += 1
        out.update(solo=True, requests=len(service), seconds=round(time.perf_counter() - t0, 3),
                   service_us=summary_us(service))
    else:
        if args.wait_file and not wait_for(args.wait_file, args.wait_timeout):
            sys.exit(f"workload: {args.wait_file} did not appear within {args.wait_timeout} s")
        if args.go_file:
            touch(args.go_file)
        rng = random.Random(args.seed)
        t0 = arrival = time.perf_counter()
        end = t0
        worst = (0.0, 0.0)
        i = 0
        while True:
            arrival += rng.expovariate(args.rate)
            if arrival - t0 >= args.seconds:
                break
            sleep_until(arrival)
            start = time.perf_counter()
            request(inputs[i % INPUTS])
            end = time.perf_counter()
            service.append(end - start)
            response.append(end - arrival)
            worst = max(worst, (end - start, start - t0))
            i += 1
        # The window, or longer when the last requests finished late (an overloaded HP).
        seconds = max(args.seconds, end - t0)
        out.update(rate=args.rate, seed=args.seed, requests=len(service), seconds=round(seconds, 3),
                   throughput=round(len(service) / seconds, 3), service_us=summary_us(service),
                   response_us=summary_us(response), worst_service_us=round(worst[0] * 1e6, 1),
                   worst_at_s=round(worst[1], 3))
    out["info"] = info
    print(json.dumps(out), flush=True)


# ------------------------------------------------------------------ BE: training

def build_be(torch, model_name):
    """A training-step function that returns the loss (a GPU tensor): the same steps as
    bench/pytorch/torch_bench.py measures alone (ResNet-50 batch 32; GPT-2 small, 4 x 512, bf16)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))
    import torch_bench
    if model_name == "resnet50":
        return torch_bench.resnet50_train_step(torch, 32)
    if model_name == "ticker":
        return ticker_step(torch)
    return torch_bench.gpt2_train_step(torch, 4, 512)


def ticker_step(torch):
    """A best-effort tenant that keeps tallyd's SM partitions split (work queued every 2 ms) while
    taking next to nothing of the GPU: HP on its reserve without BE's interference."""
    x = torch.zeros(1, device="cuda")

    def step():
        time.sleep(0.002)
        return x + 1
    return step


def run_be(args):
    torch, info = setup(args)
    step = build_be(torch, args.model)
    t_first = time.perf_counter()
    warm, go_deadline = False, None
    while True:  # uncounted: the lead, then until the HP starts its schedule
        step().item()
        now = time.perf_counter()
        if not warm and now - t_first >= args.lead:
            warm = True
            go_deadline = now + args.wait_timeout
            if args.warm_file:
                touch(args.warm_file)
        if warm and (not args.go_file or os.path.exists(args.go_file)):
            break
        if warm and args.go_file and now > go_deadline:
            sys.exit(f"workload: {args.go_file} did not appear within {args.wait_timeout} s")
    lead = time.perf_counter() - t_first
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        step().item()
        n += 1
    seconds = time.perf_counter() - t0
    print(json.dumps({"role": "be", "model": args.model, "iterations": n, "seconds": round(seconds, 3),
                      "iterations_per_s": round(n / seconds, 3), "lead_s": round(lead, 3), "info": info}),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=["hp", "be"], required=True)
    ap.add_argument("--model", required=True, help="hp: bert or resnet50; be: resnet50, gpt2 or ticker (next to no GPU work)")
    ap.add_argument("--solo", type=float, default=0, help="hp: closed loop for this many seconds")
    ap.add_argument("--rate", type=float, default=0, help="hp: Poisson arrival rate, requests/s")
    ap.add_argument("--seconds", type=float, default=10, help="measured window, s")
    ap.add_argument("--seed", type=int, default=1, help="arrival schedule (and weights) seed")
    ap.add_argument("--lead", type=float, default=10, help="be: uncounted warm-up, s")
    ap.add_argument("--wait-file", help="hp: start the schedule once this file exists")
    ap.add_argument("--go-file", help="hp: created when the schedule starts; be: counting starts once it exists")
    ap.add_argument("--warm-file", help="be: created after the lead")
    ap.add_argument("--wait-timeout", type=float, default=120, help="longest wait for --wait-file/--go-file, s")
    ap.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True")
    args = ap.parse_args()
    models = {"hp": ("bert", "resnet50"), "be": ("resnet50", "gpt2", "ticker")}[args.role]
    if args.model not in models:
        ap.error(f"--role {args.role}: --model must be one of {', '.join(models)}")
    if args.role == "hp" and args.solo <= 0 and args.rate <= 0:
        ap.error("--role hp needs --solo S or --rate R")
    if args.role == "hp":
        run_hp(args)
    else:
        run_be(args)


if __name__ == "__main__":
    main()
