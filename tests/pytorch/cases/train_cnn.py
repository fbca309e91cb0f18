"""Autograd training of a small CNN: 5 SGD steps (momentum) on a fixed batch, with batch norm.

Losses and the final weights are compared with the native run with rtol 1e-3 (training
losses; with the deterministic settings they normally agree exactly). Self-check: training on
one fixed batch must lower the loss.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, cpu_gen, setup_determinism  # noqa: E402

case = Case("train_cnn")
torch = setup_determinism()
nn = torch.nn
dev = "cuda"
STEPS = 5


def build():
    torch.manual_seed(21)  # weights are drawn on the CPU
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
        nn.Linear(32 * 4 * 4, 10))
    return model.to(dev)


def train():
    model = build()
    g = cpu_gen(22)
    x = torch.randn(16, 3, 32, 32, generator=g).to(dev)
    y = torch.randint(0, 10, (16,), generator=g).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, grad_norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)))
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0], f"loss did not go down on a fixed batch: {losses}"
    model.eval()
    with torch.no_grad():
        eval_logits = model(x)
    return {"losses": losses, "grad_norms": grad_norms, "eval_logits": eval_logits,
            "first_conv_weight": model[0].weight, "bn_running_mean": model[1].running_mean,
            "fc_weight": model[-1].weight}


case.step("train_5_steps_sgd", train, rtol=1e-3, atol=1e-5)
sys.exit(case.finish())
