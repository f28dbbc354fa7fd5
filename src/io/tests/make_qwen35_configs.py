"""Writes Qwen3.5 config.json files and, next to each, expected.json: how
transformers 5.24.0 itself interprets the file (AutoConfig.from_pretrained, and
GenerationConfig.from_model_config for the token ids). The C++ parser must agree.

usage: make_qwen35_configs.py OUTDIR [CASE...]   (default: all cases)
Some cases are written by save_pretrained, others by hand to exercise what
save_pretrained never writes (absent keys, legacy rope_scaling, nested rope).
"""
import json
import os
import sys

from transformers import AutoConfig, GenerationConfig, Qwen3_5Config, Qwen3_5TextConfig

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=6, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=8, linear_value_head_dim=8)

# Qwen3.5-0.8B text shape (shared/docs/qwen35-spec.md §1.2) inside the vision wrapper.
QWEN35_08B = dict(vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                  linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
                  linear_conv_kernel_dim=4, max_position_embeddings=262144, eos_token_id=248044,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                                   "mrope_section": [11, 11, 10], "mrope_interleaved": True})


def saved(config):
    return lambda path: config.save_pretrained(path)


def hand(obj):
    def write(path):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(obj, f, indent=2)
    return write


CASES = {
    "text_defaults": saved(Qwen3_5TextConfig()),
    "tiny_causal": saved(Qwen3_5TextConfig(**TINY, eos_token_id=[3, 5], bos_token_id=1, tie_word_embeddings=True)),
    "tiny_interval3": saved(Qwen3_5TextConfig(**TINY, full_attention_interval=3, rms_norm_eps=1e-5)),
    "qwen35_08b_wrapper": saved(Qwen3_5Config(text_config=QWEN35_08B, tie_word_embeddings=True)),
    "wrapper_untied_outer_eos": saved(Qwen3_5Config(text_config={**TINY, "eos_token_id": 7}, eos_token_id=9)),
    "hand_minimal": hand({"model_type": "qwen3_5_text"}),
    "hand_top_level_rope": hand({"model_type": "qwen3_5_text", **TINY, "rope_theta": 500000.0,
                                 "partial_rotary_factor": 0.5, "full_attention_interval": 2,
                                 "eos_token_id": 2, "tie_word_embeddings": True, "head_dim": 8}),
    "hand_legacy_rope_scaling": hand({"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", **TINY,
                                      "rope_scaling": {"type": "default", "rope_theta": 123456.0}}),
    "hand_nested_rope": hand({"model_type": "qwen3_5_text", **TINY,
                              "layer_types": ["full_attention", "linear_attention"] * 3,
                              "rope_parameters": {
                                  "full_attention": {"rope_type": "default", "rope_theta": 20000.0,
                                                     "partial_rotary_factor": 0.5},
                                  "linear_attention": {"rope_type": "default", "rope_theta": 30000.0}}}),
    "hand_wrapper_text_tie_only": hand({"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"],
                                        "text_config": {**TINY, "tie_word_embeddings": True, "eos_token_id": [4, 6]}}),
}


def full_rope(text):
    rope = text.rope_parameters
    if "full_attention" in rope:
        rope = rope["full_attention"]
    return rope


def expected(path):
    config = AutoConfig.from_pretrained(path)
    text = config.get_text_config(decoder=True)
    generation = GenerationConfig.from_model_config(config)
    rope = full_rope(text)
    eos = generation.eos_token_id
    eos = [] if eos is None else (eos if isinstance(eos, list) else [eos])
    return {
        "model_type": config.model_type,
        "vocab_size": text.vocab_size, "hidden_size": text.hidden_size,
        "intermediate_size": text.intermediate_size, "num_hidden_layers": text.num_hidden_layers,
        "num_attention_heads": text.num_attention_heads, "num_key_value_heads": text.num_key_value_heads,
        "head_dim": text.head_dim, "linear_num_key_heads": text.linear_num_key_heads,
        "linear_num_value_heads": text.linear_num_value_heads, "linear_key_head_dim": text.linear_key_head_dim,
        "linear_value_head_dim": text.linear_value_head_dim, "linear_conv_kernel_dim": text.linear_conv_kernel_dim,
        "max_position_embeddings": text.max_position_embeddings, "rms_norm_eps": text.rms_norm_eps,
        "rope_theta": rope["rope_theta"], "partial_rotary_factor": rope["partial_rotary_factor"],
        "rotary_dim": int(text.head_dim * rope["partial_rotary_factor"]),
        "layer_types": text.layer_types,
        # The model reads the outermost config's flag (PreTrainedModel ties on self.config).
        "tie_word_embeddings": config.tie_word_embeddings,
        "eos_token_ids": eos, "bos_token_id": generation.bos_token_id,
    }


def main():
    out = sys.argv[1]
    for name in sys.argv[2:] or CASES:
        path = os.path.join(out, name)
        CASES[name](path)
        with open(os.path.join(path, "expected.json"), "w") as f:
            json.dump(expected(path), f, indent=1)


if __name__ == "__main__":
    main()
