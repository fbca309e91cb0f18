# suite-env: TORCHINDUCTOR_COMPILE_THREADS=1
# suite-timeout: 480
"""torch.compile on a small MLP: default mode (Inductor + Triton kernels), forward and
backward, and mode="reduce-overhead" (CUDA graphs via cudagraph trees) in inference.

Compiled results must match eager within a tolerance (checked here) and the native run's
compiled results bit for bit. The runner gives every run its own empty Inductor/Triton cache,
so each run really compiles; through tallyd it also points TRITON_LIBCUDA_PATH at the client
(Triton links its launcher with -lcuda).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, assert_close, cpu_gen, setup_determinism  # noqa: E402

case = Case("torch_compile")
torch = setup_determinism()
nn = torch.nn
dev = "cuda"


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.LayerNorm(256), nn.Linear(256, 32), nn.Tanh()).to(dev)


def triton_info():
    import triton
    case.info["triton"] = triton.__version__
    return {"importable": True}


def default_mode():
    torch._dynamo.reset()
    model = mlp(101)
    compiled = torch.compile(model, fullgraph=True)
    x = torch.randn(64, 64, generator=cpu_gen(102)).to(dev).requires_grad_(True)
    y = compiled(x)
    y.pow(2).sum().backward()
    grads = {"x": x.grad.clone(), "w0": model[0].weight.grad.clone()}
    x2 = x.detach().clone().requires_grad_(True)
    model.zero_grad(set_to_none=True)
    y_eager = model(x2)
    y_eager.pow(2).sum().backward()
    assert_close(y, y_eager, 1e-4, 1e-5, "compiled forward vs eager")
    assert_close(grads["x"], x2.grad, 1e-3, 1e-5, "compiled grad x vs eager")
    assert_close(grads["w0"], model[0].weight.grad, 1e-3, 1e-4, "compiled grad w0 vs eager")
    return {"out": y.detach(), "grads": grads}


def reduce_overhead():
    torch._dynamo.reset()
    model = mlp(111).eval()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    outs = []
    with torch.inference_mode():
        for i in range(4):  # the first calls warm up and record the graph, later ones replay it
            x = torch.randn(32, 64, generator=cpu_gen(112 + i)).to(dev)
            y = compiled(x).clone()  # cudagraph outputs are overwritten by the next replay
            assert_close(y, model(x), 1e-4, 1e-5, f"reduce-overhead call {i} vs eager")
            outs.append(y)
    return {"outs": outs}


case.step("triton", triton_info)
case.step("default_mode", default_mode)
case.step("reduce_overhead", reduce_overhead)
sys.exit(case.finish())
