"""Go on with a host run in stock transformers from a qpu state snapshot.

`qpu generate --snapshot-at N --snapshot-dir D` writes the engine's host state after N
tokens (engine/state_snapshot.h: every GDN layer's conv inputs and recurrent state, every
attention layer's keys and values, the position). This script loads the checkpoint in
transformers (CPU; fp32 from its config), puts that state into transformers' own cache
object (DynamicCache: a LinearAttentionLayer per GDN layer, a DynamicLayer per attention
layer), feeds TOKENS (the host tokens from position N on that the run was given, e.g.
the rest of a prompt; at least the one at position N), then its own greedy argmax, one
token per forward, and prints the STEPS tokens it picked after the last of TOKENS, space
separated.

Layers the snapshot leaves out (mixers the engine skips: their output projection is all
+0, so their state changes no output) get zeros of the config's shapes.

usage: resume_from_snapshot.py CHECKPOINT_DIR SNAPSHOT TOKENS STEPS   (TOKENS: comma separated)
"""
import sys

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, DynamicCache


def cache_from_snapshot(model, path):
    cfg = model.config.get_text_config(decoder=True)
    cache = DynamicCache(config=model.config)
    conv_dim = 2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim
    kernel = cfg.linear_conv_kernel_dim
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != "qpu-state-v1":
            raise SystemExit(f"{path}: not a qpu host state snapshot")
        position = int(meta["position"])
        names = set(f.keys())

        def tensor(name, shape):
            if name not in names:
                return torch.zeros(shape, dtype=torch.float32)
            t = f.get_tensor(name)
            if list(t.shape) != list(shape):
                raise SystemExit(f"{path}: {name} has shape {list(t.shape)}, expected {list(shape)}")
            return t

        for i, kind in enumerate(cfg.layer_types):
            layer = cache.layers[i]
            if kind == "linear_attention":
                conv = tensor(f"layers.{i}.conv_state", (conv_dim, kernel - 1))
                rec = tensor(f"layers.{i}.recurrent_state",
                             (cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim))
                # transformers keeps the last `kernel` inputs (the oldest is never read again);
                # the engine the last kernel - 1.
                conv = torch.cat([torch.zeros(conv_dim, 1), conv], dim=-1).unsqueeze(0)
                layer.lazy_initialization(conv_states=conv, recurrent_states=rec.unsqueeze(0), conv_kernel_size=kernel)
                layer.conv_states[0].copy_(conv)
                layer.recurrent_states[0].copy_(rec.unsqueeze(0))
                layer.has_previous_state[0] = True
            else:
                shape = (position, cfg.num_key_value_heads, cfg.head_dim)
                keys = tensor(f"layers.{i}.key_cache", shape).permute(1, 0, 2).unsqueeze(0).contiguous()
                values = tensor(f"layers.{i}.value_cache", shape).permute(1, 0, 2).unsqueeze(0).contiguous()
                layer.update(keys, values)
    if cache.get_seq_length() != position:
        raise SystemExit(f"{path}: the cache holds {cache.get_seq_length()} positions, the snapshot {position}")
    return cache


def main() -> None:
    ckpt, snapshot, steps = sys.argv[1], sys.argv[2], int(sys.argv[4])
    given = [int(t) for t in sys.argv[3].split(",")]
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    if model.dtype != torch.float32:
        raise SystemExit(f"loaded as {model.dtype}, not float32")
    model.eval()
    picked = []
    with torch.no_grad():
        cache = cache_from_snapshot(model, snapshot)
        for i in range(len(given) - 1 + steps):
            token = given[i] if i < len(given) else picked[-1]
            out = model(input_ids=torch.tensor([[token]]), past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            if i >= len(given) - 1:
                picked.append(int(torch.argmax(out.logits[0, -1])))
    print(" ".join(str(t) for t in picked))


if __name__ == "__main__":
    main()
