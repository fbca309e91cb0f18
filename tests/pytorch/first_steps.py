"""First steps of a PyTorch user, each on its own: prints one line per step, "ok" or the error.

Run natively and through tallyd (LD_PRELOAD=libtally_client.so, GPU hidden) to see how far stock
PyTorch gets; the steps do not depend on each other's success.
"""
import sys
import traceback

import torch


def step(name, fn):
    try:
        result = fn()
        torch.cuda.synchronize()
        print(f"ok     {name}: {result}")
    except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"FAILED {name}: {first}")
        if "-v" in sys.argv:
            traceback.print_exc()


step("is_available", lambda: torch.cuda.is_available())
step("device_count", lambda: torch.cuda.device_count())
step("get_device_name", lambda: torch.cuda.get_device_name(0))
step("ones", lambda: float(torch.ones(4, device="cuda").sum().item()))
step("h2d_d2h", lambda: torch.arange(8.0).cuda().cpu().tolist())
step("elementwise", lambda: float((torch.arange(1024.0, device="cuda") * 2 + 1).sum().item()))
step("reduction", lambda: float(torch.arange(1000.0, device="cuda").mean().item()))
step("sort", lambda: torch.tensor([3.0, 1.0, 2.0], device="cuda").sort().values.tolist())
step("indexing", lambda: torch.arange(10, device="cuda")[torch.tensor([1, 3], device="cuda")].tolist())
step("matmul_fp32", lambda: float((torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")).sum().item()))
step("conv2d", lambda: float(torch.nn.functional.conv2d(torch.ones(1, 1, 8, 8, device="cuda"),
                                                         torch.ones(1, 1, 3, 3, device="cuda")).sum().item()))
