"""torchvision ResNet-50 (random weights): inference at batch 2 (fp32, cuDNN deterministic:
bit for bit vs. the native run), then one SGD training step (loss, gradient norm, loss
after the step: rtol 1e-3).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, cpu_gen, setup_determinism  # noqa: E402

case = Case("resnet50")
torch = setup_determinism()
dev = "cuda"
state = {}


def build():
    import torchvision
    torch.manual_seed(41)  # weights are drawn on the CPU
    state["model"] = torchvision.models.resnet50(weights=None).to(dev)
    g = cpu_gen(42)
    state["x"] = torch.randn(2, 3, 224, 224, generator=g).to(dev)
    state["y"] = torch.randint(0, 1000, (2,), generator=g).to(dev)
    case.info["torchvision"] = torchvision.__version__
    return {"parameters": sum(p.numel() for p in state["model"].parameters())}


def inference():
    model = state["model"].eval()
    with torch.inference_mode():
        logits = model(state["x"])
    return {"logits": logits, "top5": logits.topk(5, dim=1).indices}


def train_step():
    model = state["model"].train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(state["x"]), state["y"])
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    opt.step()
    with torch.no_grad():
        loss_after = loss_fn(model(state["x"]), state["y"])
    return {"loss": float(loss), "grad_norm": float(grad_norm), "loss_after": float(loss_after),
            "conv1_weight": model.conv1.weight, "fc_bias": model.fc.bias}


case.step("build", build)
case.step("inference_bs2", inference, needs=["build"])
case.step("train_step", train_step, rtol=1e-3, atol=1e-6, needs=["build"])
sys.exit(case.finish())
