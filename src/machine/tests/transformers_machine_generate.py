"""Runs the compiled M1 machine in stock transformers (fp32, CPU): for every prompt,
a fresh cache, the prompt one token per forward (a multi-token prefill would take
GDN's chunked path, which is not exact), then greedy generation with the argmax of
each step's logits fed back one token per forward, until DONE or MAX_NEW tokens.

usage: transformers_machine_generate.py CHECKPOINT_DIR PROMPTS_FILE DONE MAX_NEW OUT_FILE
PROMPTS_FILE: int64 little-endian, (length, tokens...) per prompt; OUT_FILE the same
layout for the generated streams.
"""
import sys

import numpy as np
import torch
from transformers import Qwen3_5ForCausalLM


def step(model, token, cache):
    out = model(input_ids=torch.tensor([[int(token)]]), past_key_values=cache, use_cache=True)
    return out.logits[0, -1], out.past_key_values


def main() -> None:
    ckpt, prompts_file, done, max_new, out_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    torch.manual_seed(0)
    # No dtype given: the checkpoint's config.json must make transformers load fp32 (its
    # shards hold bf16 and fp32 tensors; "auto" from the first tensor would be bf16).
    model = Qwen3_5ForCausalLM.from_pretrained(ckpt)
    if model.dtype != torch.float32:
        raise SystemExit(f"loaded as {model.dtype}, not float32")
    model.eval()
    if "full_attention" not in model.config.layer_types:
        raise SystemExit("expected one (idle) full_attention layer")
    data = np.fromfile(prompts_file, dtype=np.int64)
    result = []
    i = 0
    with torch.no_grad():
        while i < len(data):
            n = int(data[i])
            prompt = data[i + 1:i + 1 + n]
            i += 1 + n
            cache = None
            for t in prompt:
                logits, cache = step(model, t, cache)
            generated = []
            while len(generated) < max_new:
                nxt = int(torch.argmax(logits))
                generated.append(nxt)
                if nxt == done:
                    break
                logits, cache = step(model, nxt, cache)
            result.append(len(generated))
            result.extend(generated)
    np.array(result, dtype="<i8").tofile(out_file)


if __name__ == "__main__":
    main()
