#pragma once
// The machines' "any llama2.c checkpoint" case (test helper): a synthetic checkpoint
// whose dims come only from its header -- dim 6, hidden 5 (in chunks of 2 lanes the last
// one is padded), 3 layers, 2 heads -- with random weights (npu::unit_testing::
// random_checkpoint: rms_ffn of binades [-1, 1], the rest [-6, -1]).
#include <random>

#include "npu/tests/unit_harness.h"

namespace qpu::machine::testing {

inline reference::Llama2Checkpoint synthetic_checkpoint(std::mt19937_64& rng) {
  reference::Llama2Config cfg;
  cfg.dim = 6;
  cfg.hidden_dim = 5;
  cfg.n_layers = 3;
  cfg.n_heads = 2;
  cfg.n_kv_heads = 2;
  cfg.vocab_size = 8;
  cfg.seq_len = 4;
  return npu::unit_testing::random_checkpoint(cfg, rng, {&reference::Llama2Layout::rms_ffn});
}

}  // namespace qpu::machine::testing
