"""Decodes id sequences with stock Hugging Face tokenizers (special tokens skipped).

usage: host_tokenizer_decode.py TOKENIZER IDS_JSON OUT_JSON
TOKENIZER is a tokenizer.json file (read by `tokenizers`) or a directory holding
tokenizer.json and tokenizer_config.json (read by transformers' AutoTokenizer, as a user
of a compiled checkpoint would). IDS_JSON is a list of id lists; OUT_JSON gets
decode(ids, skip_special_tokens=True) of each.
"""
import json
import os
import sys


def load(path):
    if os.path.isdir(path):
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(path)
    from tokenizers import Tokenizer
    return Tokenizer.from_file(path)


def main() -> None:
    tok = load(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        seqs = json.load(f)
    out = [tok.decode(ids, skip_special_tokens=True) for ids in seqs]
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
