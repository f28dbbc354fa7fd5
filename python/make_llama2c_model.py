"""Write a random llama2.c checkpoint (version-0 "legacy" format, as run.c reads it) and
a tokenizer.bin for its vocabulary: small nested models for tests of "any llama2.c model".

usage: make_llama2c_model.py OUT.bin TOK.bin --dim D --hidden H --layers L --heads N
                             [--kv-heads K] [--vocab V] [--seq-len S] [--unshared]
                             [--seed SEED] [--scale SCALE | --binades LO,HI]

Weights: uniform in [-SCALE, SCALE] / sqrt(fan-in) for matrices (so activations stay
O(1) through the layers), 1 + U(-0.1, 0.1) for the RMSNorm weights, fixed seed. The
RoPE tables run.c ignores are written as run.c's export writes them.

The tokenizer: ids 0..2 are <unk>, <s>, </s>; with V >= 259 ids 3..258 are the 256 byte
tokens <0x00>..<0xFF> (run.c's byte fallback), then single characters (space first) and
two-letter merges; with a
smaller vocabulary the ids from 3 are single printable characters (space first, then
lower-case letters, ...), so only prompts made of those characters encode.
"""
import argparse
import struct
import sys

import numpy as np

CHARS = " etaoinshrdlucmfwypvbgkjqxz.,!?'ETAOINSHRDLUCMFWYPVBGKJQXZ0123456789-:;\"()"


def write_model(path, a):
    rng = np.random.default_rng(a.seed)
    head_size = a.dim // a.heads
    kv_dim = a.dim * a.kv_heads // a.heads

    def mat(rows, cols):
        return (rng.uniform(-a.scale, a.scale, size=(rows, cols)) / np.sqrt(cols)).astype("<f4")

    def norm(n):
        return (1.0 + rng.uniform(-0.1, 0.1, size=n)).astype("<f4")

    if a.binades:
        # Every float (norms too) as +-2^e (1 + m), e uniform in [lo, hi]: the C++ tests'
        # random_checkpoint, whose values are far from O(1) activations.
        lo, hi = (int(x) for x in a.binades.split(","))

        def mat(rows, cols):  # noqa: F811
            e = rng.integers(lo, hi + 1, size=(rows, cols))
            x = np.ldexp(1.0 + rng.integers(0, 1 << 23, size=(rows, cols)) * 2.0 ** -23, e)
            return np.where(rng.integers(0, 2, size=(rows, cols)) == 1, -x, x).astype("<f4")

        def norm(n):  # noqa: F811
            return mat(1, n)[0]

    L = a.layers
    parts = [
        mat(a.vocab, a.dim) if a.binades else rng.uniform(-1, 1, size=(a.vocab, a.dim)).astype("<f4"),
        np.stack([norm(a.dim) for _ in range(L)]),
        np.stack([mat(a.dim, a.dim) for _ in range(L)]),             # wq
        np.stack([mat(kv_dim, a.dim) for _ in range(L)]),            # wk
        np.stack([mat(kv_dim, a.dim) for _ in range(L)]),            # wv
        np.stack([mat(a.dim, a.dim) for _ in range(L)]),             # wo
        np.stack([norm(a.dim) for _ in range(L)]),
        np.stack([mat(a.hidden, a.dim) for _ in range(L)]),          # w1
        np.stack([mat(a.dim, a.hidden) for _ in range(L)]),          # w2
        np.stack([mat(a.hidden, a.dim) for _ in range(L)]),          # w3
        norm(a.dim),
    ]
    freqs = 1.0 / (10000.0 ** (np.arange(0, head_size, 2)[: head_size // 2] / head_size))
    angles = np.outer(np.arange(a.seq_len), freqs)
    parts += [np.cos(angles).astype("<f4"), np.sin(angles).astype("<f4")]
    if a.unshared:
        parts.append(mat(a.vocab, a.dim))
    header = struct.pack("<7i", a.dim, a.hidden, a.layers, a.heads, a.kv_heads,
                         -a.vocab if a.unshared else a.vocab, a.seq_len)
    with open(path, "wb") as f:
        f.write(header)
        for p in parts:
            f.write(np.ascontiguousarray(p, dtype="<f4").tobytes())


def vocabulary(n):
    pieces = ["<unk>", "\n<s>\n", "\n</s>\n"]
    if n >= 259:
        pieces += [f"<0x{b:02X}>" for b in range(256)]
        letters = "etaoinshrdlucmfwypvbgkjqxz"
        pieces += [c for c in CHARS[: n - len(pieces)]]
        for x in " " + letters:
            for y in letters:
                if len(pieces) == n:
                    return pieces
                pieces.append(x + y)
        while len(pieces) < n:
            pieces.append(f"w{len(pieces)}")
        return pieces
    if n - 3 > len(CHARS):
        raise SystemExit(f"make_llama2c_model: a vocabulary of {n} needs >= 259 tokens or <= {len(CHARS) + 3}")
    return pieces + list(CHARS[: n - 3])


def write_tokenizer(path, n):
    pieces = [p.encode("utf-8") for p in vocabulary(n)]
    with open(path, "wb") as f:
        f.write(struct.pack("<i", max(len(p) for p in pieces)))
        for i, p in enumerate(pieces):
            # Merges score higher the shorter their id: run.c merges the best-scoring pair.
            score = -float(i) if i >= 3 else 0.0
            f.write(struct.pack("<fi", score, len(p)))
            f.write(p)


def main():
    ap = argparse.ArgumentParser(description="Write a random llama2.c checkpoint and its tokenizer.bin")
    ap.add_argument("model")
    ap.add_argument("tokenizer")
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--unshared", action="store_true", help="write its own classifier (negative vocab_size)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--binades", default="", help="LO,HI: every weight +-2^e(1+m), e in [LO, HI] (instead of --scale)")
    a = ap.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    if min(a.dim, a.hidden, a.layers, a.heads, a.vocab, a.seq_len) <= 0 or a.dim % a.heads \
            or a.heads % a.kv_heads or (a.dim // a.heads) % 2:
        print("make_llama2c_model: dims must be positive, heads must divide dim, kv heads must divide "
              "heads and the head size must be even", file=sys.stderr)
        return 2
    write_model(a.model, a)
    write_tokenizer(a.tokenizer, a.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
