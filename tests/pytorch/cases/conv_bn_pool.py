"""cuDNN: conv2d (plain, strided/dilated/grouped), batch_norm (training and eval), max and avg
pooling, forward and backward, fp32 with cudnn.deterministic (bit for bit vs. the native run),
and an fp16 channels_last convolution (tolerance). Every fp32 result is also checked against
the same computation on the CPU.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, assert_close, cpu_gen, setup_determinism  # noqa: E402

case = Case("conv_bn_pool")
torch = setup_determinism()
F = torch.nn.functional
dev = "cuda"
TOL = (1e-4, 1e-4)  # GPU fp32 vs. CPU fp32


def grads_of(fn, tensors, seed):
    """Runs fn(*leaves) on copies of `tensors` that require grad, backpropagates a fixed random
    upstream gradient, returns (output, [grad per leaf])."""
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    y = fn(*leaves)
    up = torch.randn(y.shape, generator=cpu_gen(seed)).to(y.device, y.dtype)
    (y * up).sum().backward()
    return y.detach(), [leaf.grad for leaf in leaves]


def both(fn, tensors, seed):
    """fn on the GPU and on the CPU; the GPU results are checked against the CPU ones."""
    y, gs = grads_of(fn, [t.to(dev) for t in tensors], seed)
    yc, gcs = grads_of(fn, tensors, seed)
    assert_close(y, yc, *TOL, "output vs CPU")
    for i, (g, gc) in enumerate(zip(gs, gcs)):
        assert_close(g, gc, *TOL, f"grad of input {i} vs CPU")
    return {"out": y, "grads": gs}


def conv():
    g = cpu_gen(1)
    x, w, b = torch.randn(4, 3, 16, 16, generator=g), torch.randn(8, 3, 3, 3, generator=g), torch.randn(8, generator=g)
    x2, w2 = torch.randn(2, 8, 15, 15, generator=g), torch.randn(8, 2, 3, 3, generator=g)
    return {"plain": both(lambda x, w, b: F.conv2d(x, w, b, padding=1), [x, w, b], 11),
            "grouped_strided_dilated": both(lambda x, w: F.conv2d(x, w, stride=2, dilation=2, groups=4), [x2, w2], 12),
            "cudnn_used": torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled}


def batch_norm():
    g = cpu_gen(2)
    x = torch.randn(4, 8, 10, 10, generator=g) * 3 + 1
    weight, bias = torch.rand(8, generator=g) + 0.5, torch.randn(8, generator=g)
    stats = {}
    for where in ("cuda", "cpu"):
        rm, rv = torch.zeros(8, device=where), torch.ones(8, device=where)
        xs = [t.to(where) for t in (x, weight, bias)]
        y, gs = grads_of(lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5), xs, 21)
        y_eval = F.batch_norm(xs[0], rm, rv, xs[1], xs[2], training=False)
        stats[where] = {"train_out": y, "grads": gs, "running_mean": rm, "running_var": rv, "eval_out": y_eval}
    for k in ("train_out", "running_mean", "running_var", "eval_out"):
        assert_close(stats["cuda"][k], stats["cpu"][k], *TOL, f"batch_norm {k} vs CPU")
    for i, (gg, gc) in enumerate(zip(stats["cuda"]["grads"], stats["cpu"]["grads"])):
        assert_close(gg, gc, 1e-4, 1e-3, f"batch_norm grad {i} vs CPU")
    return stats["cuda"]


def pooling():
    x = torch.randn(2, 4, 17, 17, generator=cpu_gen(3))
    return {
        "max_2x2": both(lambda x: F.max_pool2d(x, 2), [x], 31),
        "max_3x3_s2_p1": both(lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [x], 32),
        "max_indices": F.max_pool2d(x.to(dev), 2, return_indices=True)[1],
        "avg_2x2": both(lambda x: F.avg_pool2d(x, 2), [x], 33),
        "avg_3x3_s2_p1_nopad": both(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), [x], 34),
        "adaptive_avg_fwd": F.adaptive_avg_pool2d(x.to(dev), (5, 3)),
    }


def conv_fp16_channels_last():
    g = cpu_gen(4)
    x = torch.randn(8, 16, 14, 14, generator=g).half()
    w = (torch.randn(32, 16, 3, 3, generator=g) * 0.1).half()
    xd = x.to(dev).to(memory_format=torch.channels_last)
    wd = w.to(dev).to(memory_format=torch.channels_last)
    y, (gx, gw) = grads_of(lambda x, w: F.conv2d(x, w, padding=1), [xd, wd], 41)
    assert y.dtype == torch.float16
    assert_close(y, F.conv2d(x.double(), w.double(), padding=1), 1e-2, 2e-2, "fp16 conv vs fp64 CPU")
    return {"out": y, "grad_x": gx, "grad_w": gw}


case.step("conv2d", conv)
case.step("batch_norm", batch_norm)
case.step("pooling", pooling)
case.step("conv_fp16_channels_last", conv_fp16_channels_last, rtol=2e-3, atol=1e-2)
sys.exit(case.finish())
