"""torch.cuda.CUDAGraph: capture a small MLP's forward and replay it on new inputs (each
replay must equal eager execution), then capture a whole training step (forward, backward,
SGD) and replay it 5 times (losses: rtol 1e-3). Needs stream capture through the client
(cudaStreamBeginCapture/EndCapture, cudaGraphInstantiate, cudaGraphLaunch).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, assert_close, cpu_gen, setup_determinism  # noqa: E402

case = Case("cuda_graph")
torch = setup_determinism()
nn = torch.nn
dev = "cuda"


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10)).to(dev)


def warm_up(fn, n=3):
    """PyTorch's documented pattern: run a few iterations on a side stream before capture."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(n):
            fn()
    torch.cuda.current_stream().wait_stream(s)


def forward_graph():
    model = mlp(71).eval()
    static_in = torch.zeros(16, 64, device=dev)
    with torch.no_grad():
        warm_up(lambda: model(static_in))
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)
        outs = []
        for i in range(3):
            x = torch.randn(16, 64, generator=cpu_gen(72 + i)).to(dev)
            static_in.copy_(x)
            g.replay()
            eager = model(x)
            assert_close(static_out, eager, 1e-5, 1e-6, f"replay {i} vs eager")
            outs.append(static_out.clone())
    return {"replays": outs}


def train_graph():
    model = mlp(81)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    static_x = torch.randn(32, 64, generator=cpu_gen(82)).to(dev)
    static_y = torch.randint(0, 10, (32,), generator=cpu_gen(83)).to(dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(static_x), static_y)
        loss.backward()
        opt.step()
        return loss

    warm_up(step)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = loss_fn(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    losses = []
    for i in range(5):
        static_x.copy_(torch.randn(32, 64, generator=cpu_gen(90 + i)).to(dev))
        static_y.copy_(torch.randint(0, 10, (32,), generator=cpu_gen(95 + i)).to(dev))
        g.replay()
        losses.append(float(static_loss))
    return {"losses": losses, "last_weight": model[-1].weight}


case.step("forward_capture_replay", forward_graph)
case.step("train_step_capture_replay", train_graph, rtol=1e-3, atol=1e-6)
sys.exit(case.finish())
