"""Runs a compiled INBOX checkpoint in stock transformers (fp32, CPU) the way a host
would: one token per forward call with the cache and nothing else (the checkpoint
keeps an idle full-attention layer, so transformers derives positions and masks
itself). Writes logit 0 (the inbox's out value) of every step as raw little-endian
float32.

usage: transformers_inbox_logits.py CHECKPOINT_DIR TOKENS_INT64_FILE OUT_FILE
"""
import sys

import numpy as np
import torch
from transformers import Qwen3_5ForCausalLM


def main() -> None:
    ckpt, tokens_file, out_file = sys.argv[1], sys.argv[2], sys.argv[3]
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one token at a time on a tiny model: threads only add waiting
    model = Qwen3_5ForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    model.eval()
    if "full_attention" not in model.config.layer_types:
        raise SystemExit(f"expected an idle full_attention layer, got {model.config.layer_types}")
    tokens = np.fromfile(tokens_file, dtype=np.int64)
    out_logits = np.empty(len(tokens), dtype="<f4")
    cache = None
    with torch.no_grad():
        for pos, t in enumerate(tokens):
            out = model(input_ids=torch.tensor([[int(t)]]), cache=cache, use_cache=True)
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            out_logits[pos] = out.logits[0, -1, 0].item()
    out_logits.tofile(out_file)


if __name__ == "__main__":
    main()
