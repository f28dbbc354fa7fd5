"""Convert a llama2.c checkpoint (version-0 "legacy" export, as read by run.c) into a
Hugging Face LlamaForCausalLM checkpoint: config.json + model.safetensors (float32).

usage: llama2c_to_hf.py MODEL.bin OUTDIR

The weights are copied unchanged except for one permutation: run.c rotates the pairs
(2i, 2i+1) of each head with RoPE, transformers' Llama rotates (i, i + head_size/2), so
the rows of wq and wk are reordered within each head (the inverse of llama2.c's
export.py). The result is an ordinary learned model for `qpu audit`'s false-positive
checks; transformers' greedy tokens on it follow run.c's (floating-point order differs,
so its logits are close to run.c's, not bit-identical).

OUTDIR must not exist; it is written through a temporary directory beside it and
renamed at the end, so a failure leaves nothing behind.
"""
import json
import os
import shutil
import struct
import sys
import tempfile

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

HEADER = struct.Struct("<7i")


class ConvertError(Exception):
    pass


def read_llama2c(path):
    """(config dict, dict of float32 arrays) with the file size checked against the header."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HEADER.size:
        raise ConvertError(f"{path}: {len(raw)} bytes, shorter than the 28-byte header")
    dim, hidden, layers, heads, kv_heads, vocab, seq_len = HEADER.unpack_from(raw)
    shared = vocab > 0
    vocab = abs(vocab)
    for name, value in (("dim", dim), ("hidden_dim", hidden), ("n_layers", layers),
                        ("n_heads", heads), ("n_kv_heads", kv_heads), ("vocab_size", vocab),
                        ("seq_len", seq_len)):
        if value <= 0:
            raise ConvertError(f"{path}: header {name} = {value} is not positive")
    if dim % heads or heads % kv_heads or (dim // heads) % 2:
        raise ConvertError(f"{path}: dim {dim}, n_heads {heads}, n_kv_heads {kv_heads}: "
                           "heads must divide dim, kv heads must divide heads, head size must be even")
    head_size = dim // heads
    kv_dim = dim * kv_heads // heads
    shapes = [
        ("token_embedding", (vocab, dim)), ("rms_att", (layers, dim)),
        ("wq", (layers, dim, dim)), ("wk", (layers, kv_dim, dim)), ("wv", (layers, kv_dim, dim)),
        ("wo", (layers, dim, dim)), ("rms_ffn", (layers, dim)),
        ("w1", (layers, hidden, dim)), ("w2", (layers, dim, hidden)), ("w3", (layers, hidden, dim)),
        ("rms_final", (dim,)), ("freq_cis_real", (seq_len, head_size // 2)),
        ("freq_cis_imag", (seq_len, head_size // 2)),
    ]
    if not shared:
        shapes.append(("wcls", (vocab, dim)))
    floats = sum(int(np.prod(s)) for _, s in shapes)
    expected = HEADER.size + 4 * floats
    if len(raw) != expected:
        raise ConvertError(f"{path}: {len(raw)} bytes, but its header implies {expected}")
    data = np.frombuffer(raw, dtype="<f4", offset=HEADER.size)
    tensors, at = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        tensors[name] = data[at:at + n].reshape(shape).copy()
        at += n
    config = dict(dim=dim, hidden_dim=hidden, n_layers=layers, n_heads=heads,
                  n_kv_heads=kv_heads, vocab_size=vocab, seq_len=seq_len, shared=shared)
    return config, tensors


def rope_to_half_split(w, n_heads):
    """Rows of one head, (2i, 2i+1) pairs -> (i, i + head_size/2) halves."""
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols)


def hf_model(config, tensors):
    c = config
    hf_config = LlamaConfig(
        vocab_size=c["vocab_size"], hidden_size=c["dim"], intermediate_size=c["hidden_dim"],
        num_hidden_layers=c["n_layers"], num_attention_heads=c["n_heads"],
        num_key_value_heads=c["n_kv_heads"], head_dim=c["dim"] // c["n_heads"],
        max_position_embeddings=c["seq_len"], rms_norm_eps=1e-5, rope_theta=10000.0,
        hidden_act="silu", attention_bias=False, mlp_bias=False,
        tie_word_embeddings=c["shared"], bos_token_id=1, eos_token_id=2, dtype="float32")
    model = LlamaForCausalLM(hf_config).to(torch.float32)
    t = {k: torch.from_numpy(v) for k, v in tensors.items()}
    state = {"model.embed_tokens.weight": t["token_embedding"], "model.norm.weight": t["rms_final"]}
    for l in range(c["n_layers"]):
        p = f"model.layers.{l}."
        kv_heads = c["n_kv_heads"]
        state[p + "input_layernorm.weight"] = t["rms_att"][l]
        state[p + "self_attn.q_proj.weight"] = torch.from_numpy(rope_to_half_split(tensors["wq"][l], c["n_heads"]))
        state[p + "self_attn.k_proj.weight"] = torch.from_numpy(rope_to_half_split(tensors["wk"][l], kv_heads))
        state[p + "self_attn.v_proj.weight"] = t["wv"][l]
        state[p + "self_attn.o_proj.weight"] = t["wo"][l]
        state[p + "post_attention_layernorm.weight"] = t["rms_ffn"][l]
        state[p + "mlp.gate_proj.weight"] = t["w1"][l]
        state[p + "mlp.down_proj.weight"] = t["w2"][l]
        state[p + "mlp.up_proj.weight"] = t["w3"][l]
    state["lm_head.weight"] = t["token_embedding"] if c["shared"] else t["wcls"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (c["shared"] and m == "lm_head.weight")]
    if missing or unexpected:
        raise ConvertError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    return model


def convert(model_path, out_dir):
    out_dir = os.path.abspath(out_dir)
    if os.path.lexists(out_dir):
        raise ConvertError(f"{out_dir}: already exists (choose a new directory)")
    parent = os.path.dirname(out_dir)
    if not os.path.isdir(parent):
        raise ConvertError(f"{parent}: no such directory")
    config, tensors = read_llama2c(model_path)
    model = hf_model(config, tensors)
    tmp = tempfile.mkdtemp(prefix=".llama2c-to-hf-", dir=parent)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        with open(os.path.join(tmp, "llama2c.json"), "w") as f:
            json.dump({"source": os.path.basename(model_path), **config}, f, indent=1)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return config


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        config = convert(argv[1], argv[2])
    except (ConvertError, OSError) as e:
        print(f"llama2c_to_hf: {e}", file=sys.stderr)
        return 1
    print(f"wrote {argv[2]}: LlamaForCausalLM, dim {config['dim']}, {config['n_layers']} layers, "
          f"vocab {config['vocab_size']}, {'shared' if config['shared'] else 'own'} classifier")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
