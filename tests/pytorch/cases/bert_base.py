"""BERT-base (transformers.BertConfig() defaults: 12 layers, hidden 768, random weights) as
BertForMaskedLM: inference at batch 2, seq 128 with a padded sequence (bit for bit vs. the
native run), then one AdamW training step with dropout on (losses: rtol 1e-3).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, cpu_gen, setup_determinism  # noqa: E402

case = Case("bert_base")
torch = setup_determinism()
dev = "cuda"
BATCH, SEQ = 2, 128
state = {}


def build():
    import transformers
    config = transformers.BertConfig()  # the defaults are BERT-base
    torch.manual_seed(51)  # weights are drawn on the CPU
    model = transformers.BertForMaskedLM(config).to(dev)
    g = cpu_gen(52)
    ids = torch.randint(1000, config.vocab_size, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, 100:] = 0  # the second sequence is padded
    labels = torch.full((BATCH, SEQ), -100)
    pick = torch.rand(BATCH, SEQ, generator=g) < 0.15  # 15% of the positions are predicted
    labels[pick] = ids[pick]
    state.update(model=model, ids=ids.to(dev), mask=mask.to(dev), labels=labels.to(dev))
    case.info["transformers"] = transformers.__version__
    case.info["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    return {"parameters": sum(p.numel() for p in model.parameters()), "layers": config.num_hidden_layers,
            "hidden": config.hidden_size}


def inference():
    model = state["model"].eval()
    with torch.inference_mode():
        out = model(input_ids=state["ids"], attention_mask=state["mask"])
    return {"logits": out.logits, "argmax_first_row": out.logits[0].argmax(-1)[:32]}


def train_step():
    model = state["model"].train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    opt.zero_grad(set_to_none=True)
    out = model(input_ids=state["ids"], attention_mask=state["mask"], labels=state["labels"])
    out.loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
    opt.step()
    with torch.no_grad():
        after = model(input_ids=state["ids"], attention_mask=state["mask"], labels=state["labels"]).loss
    return {"loss": out.loss.item(), "grad_norm": float(grad_norm), "loss_after": float(after),
            "word_embeddings": model.bert.embeddings.word_embeddings.weight}


case.step("build", build)
case.step("inference_bs2_seq128", inference, needs=["build"])
case.step("train_step_adamw", train_step, rtol=1e-3, atol=1e-6, needs=["build"])
sys.exit(case.finish())
