"""Decodes host id sequences of a compiled story machine with stock transformers.

usage: story_tokenizer_decode.py DIR IDS_JSON OUT_JSON
DIR holds tokenizer.json and tokenizer_config.json; IDS_JSON is a list of id lists;
OUT_JSON gets AutoTokenizer's decode(ids, skip_special_tokens=True) of each.
"""
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from transformers import AutoTokenizer  # noqa: E402


def main() -> None:
    tok = AutoTokenizer.from_pretrained(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        seqs = json.load(f)
    out = [tok.decode(ids, skip_special_tokens=True) for ids in seqs]
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
