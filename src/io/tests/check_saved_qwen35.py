"""Checks that a checkpoint written by qpu's save_qwen35 is, for transformers
5.24.0, the same model as the original it was loaded from: no missing,
unexpected or misshaped keys, every parameter bit-identical, identical logits.

usage: check_saved_qwen35.py ORIGINAL_DIR SAVED_DIR   (exit 0 when identical)
"""
import sys

import torch
from transformers import AutoModelForCausalLM


def load(path):
    model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            sys.exit(f"{path}: {key}: {info[key]}")
    return model.eval()


def main():
    original, saved = load(sys.argv[1]), load(sys.argv[2])
    if type(original) is not type(saved):
        sys.exit(f"class {type(original).__name__} != {type(saved).__name__}")
    a, b = original.state_dict(), saved.state_dict()
    if a.keys() != b.keys():
        sys.exit(f"parameter names differ: {sorted(a.keys() ^ b.keys())}")
    for name in a:
        if a[name].shape != b[name].shape or not torch.equal(a[name].view(torch.int32), b[name].view(torch.int32)):
            sys.exit(f"{name}: values differ")
    if original.config.tie_word_embeddings != saved.config.tie_word_embeddings:
        sys.exit("tie_word_embeddings differs")
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        la, lb = original(tokens).logits, saved(tokens).logits
    if not torch.equal(la.view(torch.int32), lb.view(torch.int32)):
        sys.exit("logits differ")
    print(f"identical: {len(a)} parameters, logits {tuple(la.shape)}")


if __name__ == "__main__":
    main()
