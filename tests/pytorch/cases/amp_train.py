"""Mixed-precision training as recipes write it: a small MLP + LayerNorm + GELU model, 6 steps
under torch.autocast(float16) with a GradScaler (its inf checks and unscale kernels), gradient
clipping (foreach norm) and a fused AdamW (one multi-tensor kernel per step), with a
deliberately huge loss scale first so that the scaler skips a step and backs off. Losses, the
scale's history and the final weights vs. the native run, with rtol 1e-3.
Self-checks: the first step is skipped (the scale halves), and the loss goes down.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, cpu_gen, setup_determinism  # noqa: E402

case = Case("amp_train")
torch = setup_determinism()
nn = torch.nn
dev = "cuda"
STEPS = 6


def train():
    torch.manual_seed(41)
    model = nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                          nn.Linear(512, 10)).to(dev)
    g = cpu_gen(42)
    x = torch.randn(64, 256, generator=g).to(dev)
    y = torch.randint(0, 10, (64,), generator=g).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 40)  # overflows fp16 on the first step
    losses, scales = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        scaler.step(opt)
        scaler.update()
        losses.append(float(loss))
        scales.append(float(scaler.get_scale()))
    assert scales[0] < 2.0 ** 40, f"the first step did not overflow and back off: {scales}"
    assert losses[-1] < losses[1], f"loss did not go down on a fixed batch: {losses}"
    return {"losses": losses, "scales": scales, "last_weight": model[-1].weight,
            "first_weight": model[0].weight}


case.step("train_6_steps_amp_fused_adamw", train, rtol=1e-3, atol=1e-5)
sys.exit(case.finish())
