#!/usr/bin/env python3
"""Tiny random Qwen3.5 checkpoints and transformers' own outputs on them.

For each checkpoint in CHECKPOINTS this script
  1. builds Qwen3_5ForCausalLM from a Qwen3_5TextConfig with a fixed torch seed and
     re-initializes every weight with a scale that keeps activations O(1) (the stock
     init, std 0.02, gives nearly constant logits: a weak test);
  2. saves it with save_pretrained (safetensors, F32 or BF16);
  3. reloads it from disk with from_pretrained(dtype=float32, attn_implementation=
     "eager") on CPU -- the exact path a user takes -- and runs a fixed sequence of
     PROMPT_LEN random tokens followed by GREEDY_STEPS greedy tokens, ONE TOKEN PER
     FORWARD with the cache (the first forward of a fresh cache takes transformers'
     "prefill" branch, every later one the single-token decode branch);
  4. writes every logits vector (float32 little endian, one row per forward) and the
     tokens.

Output layout (OUT_DIR):
  manifest.json                   list of {name, dir, logits, prompt, generated, ...}
  <name>/config.json, <name>/model.safetensors   the checkpoint
  <name>.logits.f32               [PROMPT_LEN + GREEDY_STEPS, vocab] float32 LE

Usage: make_tiny_checkpoints.py OUT_DIR [--only NAME ...]
Deterministic: fixed seeds, torch.set_num_threads(1), CPU only.
"""
import argparse
import json
import math
import os
import sys

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

PROMPT_LEN = 64
GREEDY_STEPS = 64
# Every greedy choice must win by this much (relative to the vector's largest logit),
# far above the ~2e-6 fp32 disagreement between two correct engines: otherwise the
# token comparison would depend on rounding. Seeds below are chosen to pass.
MIN_GREEDY_GAP = 1e-4

LIN, FULL = "linear_attention", "full_attention"

# Each entry exercises something different; see the "why" field.
CHECKPOINTS = [
    dict(
        name="mixed_gva_untied_f32",
        why="mixed layer types, GDN value heads = 2 x key heads, GQA 2, untied LM head, F32 file, "
        "head_dim 32 (scaling 32**-0.5 is not a power of two)",
        dtype="float32",
        seed=1,
        config=dict(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=5,
            layer_types=[LIN, LIN, FULL, LIN, FULL],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            rope_theta=1e7, tie_word_embeddings=False,
        ),
    ),
    dict(
        name="mixed_gqa4_tied_bf16",
        why="attention first, GQA 4 (4 heads, 1 kv head), GDN 4/4 heads with dk != dv, tied "
        "embeddings, BF16 file, rope_theta 1e4",
        dtype="bfloat16",
        seed=2,
        config=dict(
            vocab_size=300, hidden_size=96, intermediate_size=160, num_hidden_layers=6,
            layer_types=[FULL, LIN, LIN, LIN, FULL, LIN],
            num_attention_heads=4, num_key_value_heads=1, head_dim=64,
            linear_num_key_heads=4, linear_num_value_heads=4,
            linear_key_head_dim=32, linear_value_head_dim=24, linear_conv_kernel_dim=4,
            rope_theta=1e4, tie_word_embeddings=True,
        ),
    ),
    dict(
        name="interval4_gva_tied_bf16",
        why="layer_types from full_attention_interval 4 like the released models (4 layers: "
        "lin, lin, lin, full), head_dim 256 "
        "(rotary 64, theta 1e7), GQA 2, GDN 4 key / 8 value heads, tied, BF16",
        dtype="bfloat16",
        seed=5,
        drop_layer_types=True,
        config=dict(
            vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=256,
            linear_num_key_heads=4, linear_num_value_heads=8,
            linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
            rope_theta=1e7, tie_word_embeddings=True,
        ),
    ),
]


def make_config(spec):
    c = dict(spec["config"])
    theta = c.pop("rope_theta")
    c["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": theta,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    }
    c["rms_norm_eps"] = 1e-6
    c["hidden_act"] = "silu"
    c["max_position_embeddings"] = 4096
    return Qwen3_5TextConfig(**c)


@torch.no_grad()
def reinitialize(model, config):
    """Weights scaled so activations stay O(1) and every nonlinearity sees a range of
    inputs: embeddings ~ N(0, 1), projections ~ N(0, 1/fan_in), norm offsets ~ N(0, 0.2),
    slow and fast GDN decays (A in [0.01, 2], dt_bias ~ N(0, 1)), and a final norm that
    does not let a tied model copy its input.

    Conditioning matters: the engine and torch each carry their own fp32 rounding, so
    their distance is about twice torch's own distance to a float64 run of the same
    model. With tied embeddings of std 0.5 and 8 layers that distance reached 6.5e-6
    (the bar is 1e-5); with these scales it is at most ~3e-6 on these checkpoints."""
    hidden = config.hidden_size
    for name, p in model.named_parameters():
        if name.endswith("embed_tokens.weight"):
            p.normal_(0.0, 1.0)
        elif name == "lm_head.weight":
            p.normal_(0.0, 2.0 / math.sqrt(hidden))
        elif name == "model.norm.weight":
            # Final norm scale 1 + w ~ N(0, 0.5), random signs: with tied embeddings a
            # positive scale makes every fed-back token predict itself (greedy then
            # repeats one token forever, a weak test).
            p.normal_(-1.0, 0.5)
        elif name.endswith("linear_attn.norm.weight"):
            p.normal_(1.0, 0.2)
        elif name.endswith("norm.weight"):  # RMSNorm offsets (scale = 1 + w)
            p.normal_(0.0, 0.2)
        elif name.endswith("conv1d.weight"):
            p.normal_(0.0, 0.5)
        elif name.endswith("A_log"):
            p.uniform_(math.log(0.01), math.log(2.0))
        elif name.endswith("dt_bias"):
            p.normal_(0.0, 1.0)
        elif p.dim() == 2:
            p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
        else:
            raise RuntimeError(f"no init rule for {name} {tuple(p.shape)}")


@torch.no_grad()
def run_reference(model, prompt, steps):
    """One token per forward with the cache; returns (logits rows, generated tokens)."""
    cache = None
    rows, generated = [], []
    token = None
    for i in range(len(prompt) + steps):
        token = prompt[i] if i < len(prompt) else generated[-1]
        out = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True)
        cache = out.cache
        logits = out.logits[0, -1].float()
        rows.append(logits.clone())
        if i >= len(prompt) - 1 and len(generated) < steps:
            generated.append(int(torch.argmax(logits)))  # first maximum, as the engine
    return torch.stack(rows), generated


def build(spec, out_dir):
    name = spec["name"]
    ckpt_dir = os.path.join(out_dir, name)
    config = make_config(spec)
    torch.manual_seed(spec["seed"])
    model = Qwen3_5ForCausalLM(config).float().eval()
    reinitialize(model, config)
    if config.tie_word_embeddings:
        model.tie_weights()
    dtype = getattr(torch, spec["dtype"])
    model.to(dtype).save_pretrained(ckpt_dir)
    del model
    if spec.get("drop_layer_types"):
        # Like a config written by hand: the loader must derive the layer types from
        # full_attention_interval (every 4th layer is full attention).
        path = os.path.join(ckpt_dir, "config.json")
        with open(path) as f:
            saved = json.load(f)
        del saved["layer_types"]
        saved["full_attention_interval"] = 4
        with open(path, "w") as f:
            json.dump(saved, f, indent=2)

    model = Qwen3_5ForCausalLM.from_pretrained(ckpt_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    gen = torch.Generator().manual_seed(1000 + spec["seed"])
    prompt = torch.randint(0, config.vocab_size, (PROMPT_LEN,), generator=gen).tolist()
    rows, generated = run_reference(model, prompt, GREEDY_STEPS)
    chooser = rows[PROMPT_LEN - 1 : PROMPT_LEN - 1 + GREEDY_STEPS]
    top2 = chooser.topk(2, dim=1).values
    gap = float(((top2[:, 0] - top2[:, 1]) / chooser.abs().max(dim=1).values).min())
    if gap < MIN_GREEDY_GAP:
        raise SystemExit(f"{name}: a greedy step is a near tie (relative gap {gap:.2e}); change the seed")
    logits_path = os.path.join(out_dir, name + ".logits.f32")
    rows.contiguous().numpy().astype("<f4").tofile(logits_path)
    return {
        "name": name,
        "why": spec["why"],
        "dir": name,
        "file_dtype": spec["dtype"],
        "vocab_size": config.vocab_size,
        "logits": name + ".logits.f32",
        "forwards": rows.shape[0],
        "prompt": prompt,
        "generated": generated,
        "min_greedy_gap": gap,
        "attn_implementation": model.config._attn_implementation,
        "layer_types": list(config.layer_types),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--only", nargs="*", help="names of the checkpoints to build (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out_dir, exist_ok=True)
    specs = [s for s in CHECKPOINTS if not args.only or s["name"] in args.only]
    manifest = {
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "prompt_len": PROMPT_LEN,
        "greedy_steps": GREEDY_STEPS,
        "checkpoints": [build(s, args.out_dir) for s in specs],
    }
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(specs)} checkpoints to {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
