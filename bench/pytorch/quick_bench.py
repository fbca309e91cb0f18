"""Latency of .item(), a 1024-4096-1024 MLP training step (batch 256) and ResNet-18 batch-1
inference: p50/p90/p99 over 2000/100/100 repetitions after warm-up, one JSON line."""
import json, time

import torch
import torchvision

def pct(v, p): v = sorted(v); return v[min(len(v) - 1, int(p / 100 * len(v)))]
out = {}
x = torch.ones(1, device="cuda"); x.item()
t = []
for _ in range(2000):
    s = time.perf_counter(); x.item(); t.append((time.perf_counter() - s) * 1e6)
out["item_us"] = {"p50": pct(t, 50), "p90": pct(t, 90), "p99": pct(t, 99)}
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(net.parameters(), lr=0.01); inp = torch.randn(256, 1024, device="cuda")
t = []
for i in range(120):
    torch.cuda.synchronize(); s = time.perf_counter()
    opt.zero_grad(); net(inp).square().mean().backward(); opt.step(); torch.cuda.synchronize()
    if i >= 20: t.append((time.perf_counter() - s) * 1e3)
out["mlp_train_step_ms"] = {"p50": pct(t, 50), "p90": pct(t, 90), "p99": pct(t, 99)}
m = torchvision.models.resnet18().cuda().eval(); img = torch.randn(1, 3, 224, 224, device="cuda")
t = []
with torch.no_grad():
    for i in range(120):
        torch.cuda.synchronize(); s = time.perf_counter(); m(img); torch.cuda.synchronize()
        if i >= 20: t.append((time.perf_counter() - s) * 1e3)
out["resnet18_bs1_infer_ms"] = {"p50": pct(t, 50), "p90": pct(t, 90), "p99": pct(t, 99)}
print(json.dumps(out))
