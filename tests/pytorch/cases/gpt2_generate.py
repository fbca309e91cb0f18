"""GPT-2 small (transformers.GPT2Config() defaults, random weights): logits of a fixed prompt
(bit for bit vs. the native run) and greedy generation of 8 tokens
(model.generate(..., do_sample=False)) for a batch of two fixed prompts of token ids; the
generated ids must be identical to the native run's.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, setup_determinism  # noqa: E402

case = Case("gpt2_generate")
torch = setup_determinism()
dev = "cuda"
NEW_TOKENS = 8
# Two prompts of 12 token ids each (no tokenizer: nothing can be downloaded).
PROMPTS = [[464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13, 198, 464],
           [40, 1842, 5479, 329, 262, 1738, 286, 4673, 11, 290, 340, 318]]
state = {}


def build():
    import transformers
    config = transformers.GPT2Config()  # the defaults are GPT-2 small (124M)
    torch.manual_seed(61)  # weights are drawn on the CPU
    state["model"] = transformers.GPT2LMHeadModel(config).to(dev).eval()
    state["ids"] = torch.tensor(PROMPTS, device=dev)
    state["eos"] = config.eos_token_id
    case.info["transformers"] = transformers.__version__
    return {"parameters": sum(p.numel() for p in state["model"].parameters()), "layers": config.n_layer}


def prompt_logits():
    with torch.inference_mode():
        logits = state["model"](input_ids=state["ids"]).logits
    return {"logits": logits, "next_token": logits[:, -1].argmax(-1)}


def generate():
    ids = state["ids"]
    with torch.inference_mode():
        out = state["model"].generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                      min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=state["eos"])
    out = out.cpu()
    assert out.shape == (len(PROMPTS), len(PROMPTS[0]) + NEW_TOKENS), f"generated shape {list(out.shape)}"
    assert out[:, :len(PROMPTS[0])].tolist() == PROMPTS, "generate() changed the prompt"
    return {"generated": out[:, len(PROMPTS[0]):].tolist()}


case.step("build", build)
case.step("prompt_logits", prompt_logits, needs=["build"])
case.step("generate_greedy_8", generate, needs=["build"])
sys.exit(case.finish())
