"""Ordinary checkpoints written by transformers itself, for `qpu audit`'s
false-positive tests: stock-initialised and re-randomised ("trained-like") models,
saved with save_pretrained as F32 and BF16.

usage: make_ordinary_transformers.py OUTDIR
Writes OUTDIR/<name>/{config.json, model.safetensors} and OUTDIR/index.json
({"checkpoints": [{"name", "layers", "layer_types"}]}). Fixed seeds, CPU only.
"""
import json
import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen3_5ForCausalLM, Qwen3_5TextConfig

QWEN = dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=2, head_dim=64,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
            linear_value_head_dim=32, linear_conv_kernel_dim=4, tie_word_embeddings=False)
LLAMA = dict(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=6,
             num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)


def randomise(model, seed):
    """Like trained weights: every parameter drawn, heavy-tailed for matrices."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() >= 2:
                t = torch.distributions.StudentT(4.0).sample(p.shape) if "mlp" in name else \
                    torch.randn(p.shape, generator=g)
                p.copy_((t / p.shape[-1] ** 0.5).to(p.dtype))
            else:
                p.copy_((p.float() + 0.1 * torch.randn(p.shape, generator=g)).to(p.dtype))


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)
    made = []
    specs = [
        ("qwen35_init_f32", "qwen", torch.float32, False, 1),
        ("qwen35_init_bf16", "qwen", torch.bfloat16, False, 2),
        ("qwen35_trained_f32", "qwen", torch.float32, True, 3),
        ("qwen35_trained_bf16", "qwen", torch.bfloat16, True, 4),
        ("llama_init_f32", "llama", torch.float32, False, 5),
        ("llama_trained_bf16", "llama", torch.bfloat16, True, 6),
    ]
    for name, family, dtype, trained, seed in specs:
        torch.manual_seed(seed)
        if family == "qwen":
            model = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**QWEN))
        else:
            model = LlamaForCausalLM(LlamaConfig(**LLAMA))
        if trained:
            torch.manual_seed(seed + 100)
            randomise(model, seed)
        model = model.to(dtype)
        directory = os.path.join(out, name)
        model.save_pretrained(directory, safe_serialization=True)
        types = list(getattr(model.config, "layer_types", None) or [])
        made.append({"name": name, "layers": model.config.num_hidden_layers, "layer_types": types})
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump({"checkpoints": made}, f, indent=1)


if __name__ == "__main__":
    main()
