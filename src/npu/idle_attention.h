#pragma once
// The one full-attention layer a compiled checkpoint keeps for stock transformers.
//
// transformers 5.24.0 derives positions and masks from an attention layer's cache, so
// `generate` fails on a config whose layers are all linear_attention (docs/npu-machine.md).
// The layer added here is an attention memory with no data: it stores nothing and its
// o_proj has no nonzero weight, so its output is +0 on every host and the engine skips
// it entirely (engine/model.h, idle mixers: no KV cache growing with the host position).
#include "compiler/ir.h"

namespace qpu::npu {

void add_idle_attention_layer(compiler::Program& p);

}  // namespace qpu::npu
