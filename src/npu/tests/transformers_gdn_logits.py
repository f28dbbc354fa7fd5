"""Runs a compiled GDN-memory checkpoint in stock transformers (fp32, CPU), one token
per forward call with the cache (a multi-token prefill would take GDN's chunked path,
which is not exact), and writes the first N logits of every step as raw little-endian
float32.

usage: transformers_gdn_logits.py CHECKPOINT_DIR TOKENS_INT64_FILE N OUT_FILE
"""
import sys

import numpy as np
import torch
from transformers import Qwen3_5ForCausalLM


def main() -> None:
    ckpt, tokens_file, n, out_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    model.eval()
    if any(t != "linear_attention" for t in model.config.layer_types):
        raise SystemExit(f"expected only linear_attention layers, got {model.config.layer_types}")
    tokens = np.fromfile(tokens_file, dtype=np.int64)
    rows = []
    cache = None
    with torch.no_grad():
        for pos, t in enumerate(tokens):
            # transformers 5.24.0 cannot run a config without a full-attention layer
            # as is: positions and the causal mask both come from cache.get_seq_length(),
            # which raises (StopIteration -> ValueError) when no cache layer is an
            # attention layer. So pass both: explicit positions (GDN layers ignore them)
            # and the per-layer-type mask mapping with no masks (one unpadded sequence).
            out = model(input_ids=torch.tensor([[int(t)]]), position_ids=torch.tensor([[pos]]),
                        attention_mask={"full_attention": None, "linear_attention": None}, cache=cache,
                        use_cache=True)
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            rows.append(out.logits[0, -1, :n].contiguous().numpy().astype("<f4"))
    np.stack(rows).tofile(out_file)


if __name__ == "__main__":
    main()
