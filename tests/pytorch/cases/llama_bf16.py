"""A Llama-style decoder (transformers.LlamaConfig, small, random weights) in bfloat16 with grouped
query attention through scaled_dot_product_attention: logits of a fixed prompt (bit for bit vs.
the native run), greedy generation of 8 tokens with the KV cache (identical ids), and the same
prompt under torch.autocast on an fp32 copy (a second GEMM path: cuBLASLt bf16 from fp32 weights).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite_common import Case, setup_determinism  # noqa: E402

case = Case("llama_bf16")
torch = setup_determinism()
dev = "cuda"
NEW_TOKENS = 8
PROMPTS = [[1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975, 278, 17366, 11203],
           [1, 306, 626, 263, 2319, 4086, 1904, 411, 4036, 18177, 29889, 13]]
state = {}


def build():
    import transformers
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1376,
                                      num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                                      max_position_embeddings=256, attn_implementation="sdpa")
    torch.manual_seed(71)  # weights are drawn on the CPU
    model = transformers.LlamaForCausalLM(config).eval()
    state["fp32"] = model
    state["bf16"] = transformers.LlamaForCausalLM(config).eval()
    state["bf16"].load_state_dict(model.state_dict())
    state["bf16"] = state["bf16"].to(dev, dtype=torch.bfloat16)
    state["ids"] = torch.tensor(PROMPTS, device=dev)
    case.info["transformers"] = transformers.__version__
    return {"parameters": sum(p.numel() for p in model.parameters()), "kv_heads": config.num_key_value_heads}


def prompt_logits():
    with torch.inference_mode():
        logits = state["bf16"](input_ids=state["ids"]).logits
    return {"logits": logits.float(), "next_token": logits[:, -1].argmax(-1)}


def generate():
    ids = state["ids"]
    with torch.inference_mode():
        out = state["bf16"].generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                     min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    out = out.cpu()
    assert out.shape == (len(PROMPTS), len(PROMPTS[0]) + NEW_TOKENS), f"generated shape {list(out.shape)}"
    assert out[:, :len(PROMPTS[0])].tolist() == PROMPTS, "generate() changed the prompt"
    return {"generated": out[:, len(PROMPTS[0]):].tolist()}


def autocast_logits():
    model = state["fp32"].to(dev)
    with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=state["ids"]).logits
    return {"logits": logits.float()}


case.step("build", build)
case.step("prompt_logits", prompt_logits, needs=["build"])
case.step("generate_greedy_8", generate, needs=["build"])
case.step("autocast_fp32_weights", autocast_logits, needs=["build"])
sys.exit(case.finish())
