"""torch.nn.LSTM (cuDNN RNN), 2 layers, forward and backward, fp32: bit for bit vs. the native
run, and checked against the same module on the CPU; plus a bidirectional LSTM on a packed
(variable-length) batch.
"""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, assert_close, cpu_gen, setup_determinism  # noqa: E402

case = Case("lstm")
torch = setup_determinism()
nn = torch.nn
dev = "cuda"
TOL = (1e-4, 1e-5)


def fwd_bwd(lstm, x, h0c0, seed):
    out, (h, c) = lstm(x, h0c0)
    data = out.data if isinstance(out, nn.utils.rnn.PackedSequence) else out
    up = torch.randn(data.shape, generator=cpu_gen(seed)).to(data.device)
    ((data * up).sum() + h.sum() * 0.5 + c.pow(2).sum() * 0.1).backward()
    return {"out": data.detach(), "h": h.detach(), "c": c.detach(),
            "grad_params": [p.grad for p in lstm.parameters()]}


def check(gpu, cpu, what):
    for k in ("out", "h", "c"):
        assert_close(gpu[k], cpu[k], *TOL, f"{what} {k} vs CPU")
    for i, (g, c) in enumerate(zip(gpu["grad_params"], cpu["grad_params"])):
        assert_close(g, c, 1e-4, 1e-4, f"{what} grad of parameter {i} vs CPU")


def lstm_2layer():
    torch.manual_seed(5)
    cpu_model = nn.LSTM(input_size=32, hidden_size=64, num_layers=2, batch_first=True)
    gpu_model = copy.deepcopy(cpu_model).to(dev)
    g = cpu_gen(6)
    x = torch.randn(4, 16, 32, generator=g)
    h0, c0 = torch.randn(2, 4, 64, generator=g), torch.randn(2, 4, 64, generator=g)
    gpu = fwd_bwd(gpu_model, x.to(dev), (h0.to(dev), c0.to(dev)), 7)
    check(gpu, fwd_bwd(cpu_model, x, (h0, c0), 7), "2-layer LSTM")
    return gpu


def lstm_bidirectional_packed():
    torch.manual_seed(8)
    cpu_model = nn.LSTM(input_size=16, hidden_size=24, num_layers=1, bidirectional=True)
    gpu_model = copy.deepcopy(cpu_model).to(dev)
    g = cpu_gen(9)
    lengths = torch.tensor([12, 9, 5])  # sorted, as pack_padded_sequence's default expects
    x = torch.randn(12, 3, 16, generator=g)
    zeros = torch.zeros(2, 3, 24)

    def run(model, where):
        packed = nn.utils.rnn.pack_padded_sequence(x.to(where), lengths)
        return fwd_bwd(model, packed, (zeros.to(where), zeros.to(where)), 10)

    gpu = run(gpu_model, dev)
    check(gpu, run(cpu_model, "cpu"), "bidirectional packed LSTM")
    return gpu


case.step("lstm_2layer", lstm_2layer)
case.step("lstm_bidirectional_packed", lstm_bidirectional_packed)
sys.exit(case.finish())
