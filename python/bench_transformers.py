#!/usr/bin/env python3
"""Decode speed: the qpu engine vs transformers on the same checkpoint, same machine,
same thread count, in one run.

The checkpoint is random with Qwen3.5-0.8B's shapes (hidden 1024, intermediate 3584,
24 layers = 18 Gated DeltaNet + 6 gated attention, heads 8/2 of 256, linear heads
16/16 of 128, vocab 248320, tied), made by transformers itself with a fixed seed
(stock init) and saved as BF16 safetensors. It is generated once into the cache
(never committed, never downloaded).

Protocol (both sides): fp32 compute (transformers loads the BF16 file with
dtype=float32; the engine keeps the bf16 values and computes in fp32), batch 1,
WARMUP pseudo-prompt tokens fed one per forward (untimed), then STEPS greedy decode
steps, one token per forward with the cache, timed end to end. tokens/s = STEPS / time.
transformers: torch.set_num_threads(THREADS) and its default attention (sdpa, its
fastest CPU path); the engine: --threads THREADS.

Usage:
  bench_transformers.py --engine-bench BUILD/bin/engine_decode_bench [--threads 2]
      [--checkpoint DIR] [--warmup 16] [--steps 64]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig


def default_checkpoint():
    cache = os.environ.get("QPU_CACHE", os.path.expanduser("~/.cache/qpu"))
    return os.path.join(cache, "bench", "qwen35-0.8b-shapes-random-bf16")


def make_checkpoint(path):
    config = Qwen3_5TextConfig(
        vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
        num_attention_heads=8, num_key_value_heads=2, head_dim=256,
        linear_num_key_heads=16, linear_num_value_heads=16,
        linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=262144,
    )
    assert config.layer_types.count("full_attention") == 6
    print(f"creating {path} (random weights, seed 0, BF16; once)", file=sys.stderr)
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(path)


def pseudo_prompt(i, vocab):
    return (i * 7919 + 13) % vocab  # the same formula as bench/engine_decode_bench.cpp


@torch.no_grad()
def bench_transformers(path, threads, warmup, steps):
    torch.set_num_threads(threads)
    model = Qwen3_5ForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    cache = None
    out = None
    for i in range(warmup):
        out = model(input_ids=torch.tensor([[pseudo_prompt(i, vocab)]]), cache=cache, use_cache=True)
        cache = out.cache
    token = int(torch.argmax(out.logits[0, -1]))
    start = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=torch.tensor([[token]]), cache=cache, use_cache=True)
        cache = out.cache
        token = int(torch.argmax(out.logits[0, -1]))
    seconds = time.perf_counter() - start
    return steps / seconds, model.config._attn_implementation


def bench_engine(binary, path, threads, warmup, steps, extra=()):
    cmd = [binary, "--checkpoint", path, "--threads", str(threads), "--warmup", str(warmup),
           "--steps", str(steps), *extra, "--benchmark_filter=BM_Decode", "--benchmark_format=json"]
    result = subprocess.run(cmd, check=True, capture_output=True, text=True)
    report = json.loads(result.stdout)
    b = report["benchmarks"][0]
    if b.get("error_occurred"):
        raise SystemExit(f"engine benchmark failed: {b.get('error_message')}")
    return b["items_per_second"], b.get("label", ""), cmd


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine-bench", required=True, help="path of engine_decode_bench")
    parser.add_argument("--checkpoint", default=default_checkpoint())
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()

    if not os.path.exists(os.path.join(args.checkpoint, "config.json")):
        make_checkpoint(args.checkpoint)
    hf_tps, attn = bench_transformers(args.checkpoint, args.threads, args.warmup, args.steps)
    engine_tps, label, cmd = bench_engine(args.engine_bench, args.checkpoint, args.threads, args.warmup, args.steps)
    # The same with the matrices kept in fp32 (no exact-bf16 storage): what the kernel
    # and the absence of Python overhead give on their own.
    f32_tps, _, _ = bench_engine(args.engine_bench, args.checkpoint, args.threads, args.warmup, args.steps,
                                 ["--fp32-weights"])

    print(f"checkpoint: {args.checkpoint} (Qwen3.5-0.8B shapes, random, BF16 file)")
    print(f"protocol: {args.warmup} warm-up tokens, then {args.steps} greedy decode steps, batch 1, "
          f"{args.threads} threads, fp32 compute")
    print(f"transformers {__import__('transformers').__version__} / torch {torch.__version__} "
          f"(attn {attn}): {hf_tps:.2f} tokens/s")
    print(f"qpu engine ({label}): {engine_tps:.2f} tokens/s")
    print(f"ratio engine / transformers: {engine_tps / hf_tps:.2f}x")
    print(f"qpu engine with fp32 weight storage: {f32_tps:.2f} tokens/s ({f32_tps / hf_tps:.2f}x)")
    print(f"engine command: {' '.join(cmd)}")


if __name__ == "__main__":
    main()
