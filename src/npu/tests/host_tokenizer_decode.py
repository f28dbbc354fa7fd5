"""Decodes id sequences with stock `tokenizers` (special tokens skipped).

usage: host_tokenizer_decode.py TOKENIZER_JSON IDS_JSON OUT_JSON
IDS_JSON is a list of id lists; OUT_JSON gets the list of decoded strings.
"""
import json
import sys

from tokenizers import Tokenizer


def main() -> None:
    tok = Tokenizer.from_file(sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        seqs = json.load(f)
    out = [tok.decode(ids, skip_special_tokens=True) for ids in seqs]
    with open(sys.argv[3], "w", encoding="utf-8") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
