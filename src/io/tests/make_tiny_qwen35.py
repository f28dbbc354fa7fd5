"""Writes tiny Qwen3.5 checkpoints with transformers' own save_pretrained, plus an
independent fp32 dump of every tensor (read back with the safetensors library and
widened by torch), so the C++ loader can be compared with them bit for bit.

usage: make_tiny_qwen35.py OUTDIR [VARIANT...]   (default: all variants)
Creates OUTDIR/<variant>/{config.json, *.safetensors, reference.json, reference.bin}.
reference.json: {"tensors": {name: {"shape": [...], "offset": float index}}}, and
reference.bin the concatenated little-endian float32 values.
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM,
                          Qwen3_5ForConditionalGeneration, Qwen3_5TextConfig)

TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=5,
            num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=8, linear_conv_kernel_dim=4, eos_token_id=[3, 5],
            bos_token_id=1)


def randomise(model, seed):
    # transformers initialises norms to exact 0/1; random values make every bit count.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype))


def special_values(model, dtype):
    # Signed zero, the smallest subnormal, infinities and NaN must survive loading.
    emb = model.get_input_embeddings().weight
    tiny = torch.finfo(dtype).smallest_normal / 2 ** 3
    with torch.no_grad():
        emb[0, :6] = torch.tensor([-0.0, tiny, -tiny, float("inf"), float("-inf"), float("nan")]).to(dtype)


def keep_fp32(model):
    # Like the released Qwen3.5 checkpoints: A_log and the gated norm weight stay F32.
    for name, module in model.named_modules():
        if name.endswith("linear_attn"):
            module.A_log.data = module.A_log.data.float()
            module.norm.weight.data = module.norm.weight.data.float()


def dump_reference(directory):
    names = {}
    files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    manifest, chunks, offset = {}, [], 0
    for f in files:
        with safe_open(os.path.join(directory, f), framework="pt") as st:
            for name in st.keys():
                t = st.get_tensor(name).to(torch.float32).contiguous()
                manifest[name] = {"shape": list(t.shape), "offset": offset, "file": f}
                chunks.append(t.numpy().tobytes())
                offset += t.numel()
    with open(os.path.join(directory, "reference.bin"), "wb") as out:
        for c in chunks:
            out.write(c)
    with open(os.path.join(directory, "reference.json"), "w") as out:
        json.dump({"tensors": manifest}, out, indent=1)


def causal(out, name, dtype, seed, shard=None, **overrides):
    torch.manual_seed(seed)
    config = Qwen3_5TextConfig(**{**TEXT, **overrides})
    model = Qwen3_5ForCausalLM(config)
    randomise(model, seed)
    model = model.to(dtype)
    if dtype != torch.float32:
        keep_fp32(model)
    special_values(model, dtype)
    path = os.path.join(out, name)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(path, **kwargs)
    dump_reference(path)


def wrapper(out, name, dtype, seed):
    torch.manual_seed(seed)
    config = Qwen3_5Config(
        text_config={**TEXT, "layer_types": ["full_attention", "linear_attention", "linear_attention",
                                             "full_attention", "linear_attention"]},
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                           out_hidden_size=32, patch_size=4, num_position_embeddings=16),
        tie_word_embeddings=True)
    model = Qwen3_5ForConditionalGeneration(config)
    randomise(model, seed)
    model = model.to(dtype)
    special_values(model, dtype)
    path = os.path.join(out, name)
    model.save_pretrained(path)
    dump_reference(path)


VARIANTS = {
    "causal_f32": lambda out: causal(out, "causal_f32", torch.float32, 1),
    "causal_bf16": lambda out: causal(out, "causal_bf16", torch.bfloat16, 2),
    "causal_f16": lambda out: causal(out, "causal_f16", torch.float16, 3),
    "causal_tied_sharded": lambda out: causal(out, "causal_tied_sharded", torch.bfloat16, 4, shard="20KB",
                                              tie_word_embeddings=True, full_attention_interval=2),
    "wrapper_bf16": lambda out: wrapper(out, "wrapper_bf16", torch.bfloat16, 5),
}


def main():
    out = sys.argv[1]
    for variant in sys.argv[2:] or VARIANTS:
        VARIANTS[variant](out)


if __name__ == "__main__":
    main()
