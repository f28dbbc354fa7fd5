"""Greedy tokens of a Hugging Face checkpoint in stock transformers (CPU, float32).

usage: transformers_greedy.py DIR STEPS ID [ID ...]
Prints the whole sequence (the given ids, then STEPS generated ones) as a JSON list.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    directory, steps, ids = sys.argv[1], int(sys.argv[2]), [int(a) for a in sys.argv[3:]]
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    out = model.generate(torch.tensor([ids]), max_new_tokens=steps, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    print(json.dumps(out[0].tolist()))


if __name__ == "__main__":
    main()
