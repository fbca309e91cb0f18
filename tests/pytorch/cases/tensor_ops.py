"""Tensor creation, host<->device copies, elementwise ops, reductions, sort and indexing.

All of it is PyTorch's own kernels (no vendor library), deterministic: compared bit for bit.
A few results are also checked against the CPU inside the case.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, assert_close, cpu_gen, setup_determinism  # noqa: E402

case = Case("tensor_ops")
torch = setup_determinism()
dev = "cuda"


def device_info():
    p = torch.cuda.get_device_properties(0)
    return {"available": torch.cuda.is_available(), "count": torch.cuda.device_count(),
            "name": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
            "sm_count": p.multi_processor_count, "total_memory": p.total_memory}


def creation():
    g = torch.Generator(device=dev).manual_seed(7)  # the CUDA Philox generator
    ar = torch.arange(0, 1000, 3, device=dev)
    assert torch.equal(ar.cpu(), torch.arange(0, 1000, 3)), "arange differs from the CPU"
    return {
        "zeros": torch.zeros(3, 5, device=dev), "ones_bf16": torch.ones(7, device=dev, dtype=torch.bfloat16),
        "arange": ar, "linspace": torch.linspace(-1, 1, 257, device=dev),
        "full_fp16": torch.full((4, 4), 3.5, device=dev, dtype=torch.float16),
        "eye": torch.eye(5, device=dev), "randn": torch.randn(1000, device=dev, generator=g),
        "rand": torch.rand(64, 64, device=dev, generator=g),
        "randint": torch.randint(0, 100, (500,), device=dev, generator=g),
        "randperm": torch.randperm(300, device=dev, generator=g),
        "empty_like_shape": list(torch.empty_like(ar).shape),
    }


def copies():
    x = torch.randn(1 << 20, generator=cpu_gen(1))  # 4 MiB, pageable
    pinned = torch.randn(1 << 20, generator=cpu_gen(2)).pin_memory()
    big = torch.randint(0, 256, (64 << 20,), dtype=torch.uint8, generator=cpu_gen(3))  # 64 MiB
    xd = x.to(dev)
    pd = pinned.to(dev, non_blocking=True)
    bd = big.to(dev)
    back = torch.empty_like(pinned).pin_memory()
    back.copy_(pd, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(xd.cpu(), x) and torch.equal(back, pinned) and torch.equal(bd.cpu(), big), \
        "host->device->host round trip changed the data"
    d2d = xd.clone()
    return {"pageable": xd, "pinned": pd, "big": bd, "d2d": d2d, "to_fp16": xd.half(), "to_int": (xd * 100).int(),
            "strided_to_cpu": xd.view(1024, 1024)[::7, 3::11].cpu(), "item": xd[12345].item()}


def elementwise():
    x = torch.randn(4096, generator=cpu_gen(4)).to(dev)
    y = torch.rand(4096, generator=cpu_gen(5)).to(dev) + 0.5
    n = torch.randint(-1000, 1000, (4096,), generator=cpu_gen(6)).to(dev)
    out = {
        "add": x + y, "mul": x * y, "div": x / y, "exp": x.exp(), "log": y.log(), "sin": x.sin(),
        "tanh": x.tanh(), "sigmoid": x.sigmoid(), "gelu": torch.nn.functional.gelu(x), "pow": y.pow(2.5),
        "where": torch.where(x > 0, x, y), "clamp": x.clamp(-0.5, 0.5), "bf16": (x.bfloat16() * 3).float(),
        "fp16": (x.half() + y.half()), "int_ops": (n % 7) + (n & 0xF) * 3, "cmp": (x > y).sum(),
        "fma_inplace": x.clone().mul_(2).add_(y, alpha=0.25),
    }
    assert_close(out["exp"], x.cpu().exp(), 1e-6, 1e-6, "exp vs CPU")
    assert torch.equal(out["int_ops"].cpu(), (n.cpu() % 7) + (n.cpu() & 0xF) * 3), "integer ops differ from the CPU"
    return out


def reductions():
    x = torch.randn(256, 1000, generator=cpu_gen(8)).to(dev)
    out = {
        "sum": x.sum(), "mean": x.mean(), "std": x.std(), "var_dim": x.var(dim=1), "max": x.max(),
        "argmax_dim": x.argmax(dim=1), "min_dim": x.min(dim=0).values, "prod": (x[0, :20] * 0.5 + 1).prod(),
        "cumsum": x[0].cumsum(0), "logsumexp": x.logsumexp(dim=1), "norm": x.norm(), "sum_bf16": x.bfloat16().sum(dim=1),
        "softmax": torch.softmax(x, dim=1), "any_all": [bool((x > 4).any()), bool((x > -10).all())],
        "count_nonzero": torch.count_nonzero(x > 1),
    }
    assert_close(out["sum"], x.cpu().double().sum(), 1e-4, 1e-3, "sum vs CPU")
    return out


def sort_ops():
    x = torch.randint(0, 50, (100000,), generator=cpu_gen(9)).float().to(dev)  # many duplicates
    v, i = torch.sort(x, stable=True)
    assert torch.equal(v.cpu(), torch.sort(x.cpu(), stable=True).values), "sort values differ from the CPU"
    assert torch.equal(i.cpu(), torch.sort(x.cpu(), stable=True).indices), "stable sort indices differ from the CPU"
    f = torch.randn(5000, generator=cpu_gen(10)).to(dev)
    return {"values": v, "indices": i, "topk": torch.topk(f, 10), "argsort_desc": torch.argsort(f, descending=True),
            "unique": torch.unique(x, return_counts=True), "kthvalue": torch.kthvalue(f, 100).values,
            "sort_2d": torch.sort(f.view(50, 100), dim=1).values}


def indexing():
    x = torch.randn(100, 64, generator=cpu_gen(11)).to(dev)
    idx = torch.randperm(100, generator=cpu_gen(12))[:30].to(dev)  # unique: scatter stays deterministic
    mask = x > 0.5
    acc = torch.zeros(10, device=dev)
    acc.index_put_((torch.tensor([1, 3, 1, 7, 3, 1], device=dev),), torch.arange(6.0, device=dev), accumulate=True)
    y = x.clone()
    y[mask] = -1.0
    z = torch.zeros(100, 64, device=dev).scatter_(0, idx.view(-1, 1).expand(-1, 64), x[:30])
    assert acc.cpu().tolist()[1] == 0.0 + 2.0 + 5.0, "index_put_ accumulate gave a wrong sum"
    return {"index_select": x.index_select(0, idx), "gather": torch.gather(x[:30], 1, (idx.view(-1, 1) + torch.arange(4, device=dev)) % 64),
            "masked_select": x.masked_select(mask), "nonzero": mask.nonzero(), "mask_assign": y, "scatter": z,
            "index_put_acc": acc, "advanced": x[idx, idx % 64], "slices": x[10:90:3, ::5].contiguous(),
            "cat_stack": torch.cat([x[:5], torch.stack([x[0], x[1]])]), "transpose": x.t().contiguous()}


case.step("device", device_info)
case.step("creation", creation, needs=["device"])
case.step("copies", copies, needs=["device"])
case.step("elementwise", elementwise, needs=["device"])
case.step("reductions", reductions, needs=["device"])
case.step("sort", sort_ops, needs=["device"])
case.step("indexing", indexing, needs=["device"])
sys.exit(case.finish())
