"""Write a freshly initialised Qwen3.5 text checkpoint at a released model's shape, with
transformers' own initialisation, stored as the released checkpoints are: BF16, except
the GDN `A_log` and `linear_attn.norm.weight` tensors in F32 (docs: qwen35-spec.md §1).

usage: make_qwen35_init.py {0.8b,4b} OUTDIR [--seed S] [--dtype bf16|f32]

An ordinary model for `qpu audit`'s false-positive checks at real sizes (the weights
themselves are not downloaded: only the configuration is the released one). The model is
built directly in the storage dtype, so the 4B shape needs about 9 GB of memory in BF16.
OUTDIR must not exist; it is written through a temporary directory beside it and renamed
at the end.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

ROPE = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}
COMMON = dict(vocab_size=248320, tie_word_embeddings=True, rms_norm_eps=1e-6, head_dim=256,
              linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
              full_attention_interval=4, max_position_embeddings=262144, hidden_act="silu",
              attention_bias=False, eos_token_id=248044, rope_parameters=ROPE)
SHAPES = {
    "0.8b": dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                 num_attention_heads=8, num_key_value_heads=2,
                 linear_num_key_heads=16, linear_num_value_heads=16),
    "4b": dict(hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
               num_attention_heads=16, num_key_value_heads=4,
               linear_num_key_heads=16, linear_num_value_heads=32),
}
F32_TENSORS = ("linear_attn.A_log", "linear_attn.norm.weight")


def build(shape, seed, dtype):
    config = Qwen3_5TextConfig(**COMMON, **SHAPES[shape])
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = Qwen3_5ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(F32_TENSORS):
                p.data = p.data.to(torch.float32)
    model.config.dtype = "bfloat16" if dtype == torch.bfloat16 else "float32"
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    if os.path.lexists(out):
        print(f"make_qwen35_init: {out}: already exists", file=sys.stderr)
        return 1
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    start = time.time()
    model = build(args.shape, args.seed, torch.bfloat16 if args.dtype == "bf16" else torch.float32)
    params = sum(p.numel() for p in model.parameters())
    tmp = tempfile.mkdtemp(prefix=".qwen35-init-", dir=os.path.dirname(out))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        with open(os.path.join(tmp, "layer_types.json"), "w") as f:
            json.dump({"layer_types": list(model.config.layer_types), "parameters": params}, f)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"wrote {out}: Qwen3.5 {args.shape} shape, {params} parameters, {args.dtype}, "
          f"{time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
