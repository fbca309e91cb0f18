"""fp32 / bf16 / fp16 matmul, F.linear (bias epilogue), bmm and addmm, once with PyTorch
preferring cuBLAS and once cuBLASLt (torch.backends.cuda.preferred_blas_library).

fp32 is compared bit for bit with the native run; bf16/fp16 with a tolerance of about two
units in the last place (the same library on the same GPU should still agree exactly).
Each result is also checked against a float64 CPU product of the same (rounded) inputs.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, assert_close, cpu_gen, setup_determinism  # noqa: E402

case = Case("matmul")
torch = setup_determinism()
F = torch.nn.functional
dev = "cuda"

DTYPES = {  # name: (dtype, tolerance vs. the native run, tolerance vs. the fp64 CPU product)
    "fp32": (torch.float32, None, (1e-4, 1e-4)),
    "bf16": (torch.bfloat16, (2e-2, 5e-2), (2e-2, 0.25)),
    "fp16": (torch.float16, (2e-3, 1e-2), (5e-3, 0.05)),
}


def inputs(dtype, seed):
    g = cpu_gen(seed)
    r = lambda *s: torch.randn(*s, generator=g).to(dtype)  # noqa: E731 - rounded on the CPU, then copied
    return {"a": r(128, 256), "b": r(256, 64), "x": r(32, 256), "w": r(96, 256), "bias": r(96),
            "ba": r(4, 64, 32), "bb": r(4, 32, 48), "c": r(128, 64), "odd_a": r(33, 65), "odd_b": r(65, 17)}


def run(lib, name):
    dtype, _, (rtol, atol) = DTYPES[name]
    torch.backends.cuda.preferred_blas_library(lib)
    cpu = inputs(dtype, seed=100 + list(DTYPES).index(name))
    d = {k: v.to(dev) for k, v in cpu.items()}
    out = {
        "matmul": torch.matmul(d["a"], d["b"]),
        "matmul_t": torch.matmul(d["b"].t(), d["a"].t()),  # transposed (non-contiguous) operands
        "linear": F.linear(d["x"], d["w"], d["bias"]),
        "linear_nobias": F.linear(d["x"], d["w"]),
        "bmm": torch.bmm(d["ba"], d["bb"]),
        "addmm": torch.addmm(d["c"], d["a"], d["b"], beta=0.5, alpha=2.0),
        "odd_shape": d["odd_a"] @ d["odd_b"],
    }
    c64 = {k: v.double() for k, v in cpu.items()}
    ref = {
        "matmul": c64["a"] @ c64["b"], "matmul_t": c64["b"].t() @ c64["a"].t(),
        "linear": c64["x"] @ c64["w"].t() + c64["bias"], "linear_nobias": c64["x"] @ c64["w"].t(),
        "bmm": torch.bmm(c64["ba"], c64["bb"]), "addmm": 0.5 * c64["c"] + 2.0 * (c64["a"] @ c64["b"]),
        "odd_shape": c64["odd_a"] @ c64["odd_b"],
    }
    for k in out:
        assert out[k].dtype == dtype, f"{k}: dtype {out[k].dtype}, expected {dtype}"
        assert_close(out[k], ref[k], rtol, atol, f"{lib} {name} {k} vs fp64 CPU")
    now = torch.backends.cuda.preferred_blas_library()
    out["preferred_library"] = str(getattr(now, "name", now)).split(".")[-1].lower()
    assert out["preferred_library"] == lib, f"preferred_blas_library() is {now}, asked for {lib}"
    return out


for lib in ("cublas", "cublaslt"):
    for name, (_, tol, _) in DTYPES.items():
        rtol, atol = tol if tol else (None, None)
        case.step(f"{lib}_{name}", lambda lib=lib, name=name: run(lib, name), rtol=rtol, atol=atol)
sys.exit(case.finish())
