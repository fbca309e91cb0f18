"""The workload of the two allocator cases (alloc_expandable.py, alloc_cuda_malloc_async.py);
not a case itself. The runner sets PYTORCH_CUDA_ALLOC_CONF from the case file's
"# suite-env:" header; the case checks that the setting took effect.

Steps: growing allocations up to 256 MiB with exactly known contents, freeing half and
allocating again (reuse and growth), cross-stream use with record_stream, empty_cache() and a
large allocation after it, and a small model's forward/backward. All bit for bit.
"""
import os

from suite_common import Case, cpu_gen, setup_determinism

MIB = 1 << 20


def mod_sum(n, m):
    """Exact sum of k % m for k in [0, n)."""
    q, r = divmod(n, m)
    return q * m * (m - 1) // 2 + r * (r - 1) // 2


def filled(mib, m):
    import torch
    return torch.arange(mib * MIB // 4, dtype=torch.int32, device="cuda").remainder_(m)


def check_filled(t, m, what):
    import torch
    got = int(t.sum(dtype=torch.int64))
    want = mod_sum(t.numel(), m)
    assert got == want, f"{what}: sum {got}, expected {want} (allocation returned wrong or shared memory)"
    return got


def run(name, conf_part, backend):
    case = Case(name)
    torch = setup_determinism()
    native_stats = backend == "native"  # memory_allocated() bookkeeping is the native allocator's

    def config():
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
        assert conf_part in conf, (f"PYTORCH_CUDA_ALLOC_CONF={conf!r} does not contain {conf_part!r} "
                                   "(the runner sets it from this case's '# suite-env:' header)")
        torch.ones(1, device="cuda")
        got = torch.cuda.get_allocator_backend()
        assert got == backend, f"allocator backend is {got!r}, expected {backend!r}"
        return {"backend": got}

    def grow_and_free():
        base = torch.cuda.memory_allocated() if native_stats else None
        sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256]
        tensors = {mib: filled(mib, 1000 + mib) for mib in sizes}
        sums = {str(mib): check_filled(t, 1000 + mib, f"{mib} MiB") for mib, t in tensors.items()}
        for mib in sizes[::2]:
            del tensors[mib]  # free half, then allocate sizes that can reuse or must grow
        again = {mib: filled(mib, 77 + mib) for mib in (3, 5, 24, 100, 300)}
        for mib, t in again.items():
            sums[f"again_{mib}"] = check_filled(t, 77 + mib, f"{mib} MiB after frees")
        for mib, t in tensors.items():
            sums[f"kept_{mib}"] = check_filled(t, 1000 + mib, f"kept {mib} MiB")
        del tensors, again, t  # (t: the loops' last tensor)
        torch.cuda.synchronize()
        if native_stats:
            now = torch.cuda.memory_allocated()
            assert now == base, f"memory_allocated() is {now} after freeing everything, {base} before"
        return {"sums": sums}

    def streams():
        side = torch.cuda.Stream()
        results = []
        for i in range(4):
            with torch.cuda.stream(side):
                t = filled(8, 500 + i)  # allocated on the side stream
            torch.cuda.current_stream().wait_stream(side)
            t.record_stream(torch.cuda.current_stream())
            results.append(check_filled(t * 1, 500 + i, f"cross-stream {i}"))
            del t  # freed while the main stream may still use it: record_stream keeps it safe
            u = filled(8, 900 + i)  # may reuse the block
            results.append(check_filled(u, 900 + i, f"reuse {i}"))
        return {"sums": results}

    def empty_cache():
        torch.cuda.empty_cache()
        t = filled(512, 12345)
        s = check_filled(t, 12345, "512 MiB after empty_cache")
        del t
        torch.cuda.empty_cache()
        return {"sum": s}

    def expandable():
        t = filled(64, 99)  # at least one live segment
        segs = torch.cuda.memory._snapshot().get("segments", [])
        assert segs, "the allocator snapshot lists no segments"
        if not any("is_expandable" in s for s in segs):
            return {"all_expandable": None}  # this PyTorch does not say; nothing to check
        flags = sorted({bool(s.get("is_expandable")) for s in segs})
        assert flags == [True], f"is_expandable of the segments: {flags}"
        del t
        return {"all_expandable": True}

    def model():
        torch.manual_seed(3)
        m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8)).to("cuda")
        x = torch.randn(128, 256, generator=cpu_gen(4)).to("cuda")
        m(x).square().sum().backward()
        return {"grad0": m[0].weight.grad, "grad2": m[2].weight.grad}

    case.step("config", config)
    case.step("grow_and_free", grow_and_free, needs=["config"])
    case.step("cross_stream", streams, needs=["config"])
    case.step("empty_cache", empty_cache, needs=["config"])
    if conf_part.startswith("expandable_segments"):
        case.step("segments_expandable", expandable, needs=["config"])
    case.step("model", model, needs=["config"])
    return case.finish()
