"""Runs a compiled NPU test checkpoint in stock transformers (fp32, CPU) and writes the
first N logits of every token as raw little-endian float32.

usage: transformers_logits.py CHECKPOINT_DIR TOKENS_INT64_FILE N OUT_FILE

Every token is an independent one-token sequence (the MLP primitives keep no state),
so all of them run as one batch: torch's matmuls then sum in whatever order MKL picks.
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
    tokens = torch.from_numpy(np.fromfile(tokens_file, dtype=np.int64)).view(-1, 1)
    with torch.no_grad():
        logits = model(input_ids=tokens, use_cache=False).logits[:, 0, :n]
    logits.contiguous().numpy().astype("<f4").tofile(out_file)


if __name__ == "__main__":
    main()
