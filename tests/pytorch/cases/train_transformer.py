"""Autograd training of a small transformer encoder (nn.TransformerEncoder, dropout on):
5 AdamW steps on a fixed batch of token sequences, then an eval forward (which takes
PyTorch's fused "fast path" kernels). Losses and outputs vs. the native run with rtol 1e-3.
Self-check: the loss goes down on the fixed batch.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, cpu_gen, setup_determinism  # noqa: E402

case = Case("train_transformer")
torch = setup_determinism()
nn = torch.nn
dev = "cuda"
STEPS, VOCAB, D = 5, 100, 64


class TinyEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        layer = nn.TransformerEncoderLayer(d_model=D, nhead=4, dim_feedforward=128, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, tokens, pad_mask=None):
        return self.head(self.encoder(self.embed(tokens), src_key_padding_mask=pad_mask))


def train():
    torch.manual_seed(31)
    model = TinyEncoder().to(dev)
    g = cpu_gen(32)
    tokens = torch.randint(0, VOCAB, (8, 32), generator=g).to(dev)
    targets = tokens.roll(-1, dims=1)  # predict the next token
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0], f"loss did not go down on a fixed batch: {losses}"
    model.eval()
    pad = torch.zeros(8, 32, dtype=torch.bool, device=dev)
    pad[4:, 24:] = True  # padded tails for half the batch
    with torch.inference_mode():
        eval_out = model(tokens, pad)[:, :24]  # padded positions are undefined on the fast path
    return {"losses": losses, "eval_logits": eval_out, "embed_weight": model.embed.weight,
            "adam_exp_avg_sq_first": next(iter(opt.state.values()))["exp_avg_sq"]}


case.step("train_5_steps_adamw", train, rtol=1e-3, atol=1e-5)
sys.exit(case.finish())
